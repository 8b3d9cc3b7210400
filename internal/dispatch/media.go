package dispatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/media"
	"github.com/msgpulse/msgpulse/internal/provider"
)

// mediaPool downloads the files of WeCom media messages off the send path
// (issue 37: one tenant's images, served a byte a second, held every send
// worker for 30 s). A media job is handed on to the pool and its worker
// goes back to the queue. The pool runs at most workers downloads at once,
// at most perTenant of them one tenant's, and keeps the others waiting, in
// turn by tenant; the jobs of one tenant's file (same URL and kind) share
// one download. After its download each job goes on in its own goroutine:
// the upload (WECOM_MEDIA_UPLOAD_TIMEOUT, once per file across the fleet),
// the call or the merge, finish.
//
// The pool holds at most capacity jobs (mediaHeld per worker), one tenant
// at most half of them; a job beyond that does not wait here but comes
// back after mediaBusyWait (a snooze, before its claim: nothing attempted,
// nothing recorded). So a tenant's slow files slow its own media alone:
// they never take a send worker, another tenant's download slot, or more
// than half the room the WeCom queues keep for the pool (Pools).
type mediaPool struct {
	d                  *Dispatcher
	workers, perTenant int

	mu       sync.Mutex
	running  int // downloads under way
	held     int // jobs reserved: from reserve until finished
	tenants  map[string]*tenantMedia
	turn     []string               // tenants with downloads waiting, in the order they are served
	fetches  map[string]*mediaFetch // by tenant, kind and URL: not finished yet
	draining bool
}

// mediaHeld is how many jobs the pool holds per worker, downloading,
// waiting or after their download.
const mediaHeld = 8

// mediaBusyWait is how long a media job the pool has no room for waits in
// the delay queues before it comes back.
const mediaBusyWait = 2 * time.Second

type tenantMedia struct {
	held, running int
	waiting       []*mediaFetch
}

// mediaFetch is one download and the jobs that share it.
type mediaFetch struct {
	key, tenant string
	ctx         context.Context // its first job's
	md          *envelope.Media
	jobs        []*mediaJob // under mu
}

type mediaJob struct {
	ctx    context.Context
	j      *job
	m      provider.WeCom
	tenant string
}

// mediaSlot is a job's place in the pool.
type mediaSlot int8

const (
	mediaNone      mediaSlot = iota
	mediaReserved            // counted in the pool's held, not yet submitted
	mediaSubmitted           // the pool has it, and frees its place
)

func newMediaPool(d *Dispatcher, workers, perTenant int) *mediaPool {
	return &mediaPool{d: d, workers: workers, perTenant: perTenant, tenants: map[string]*tenantMedia{}, fetches: map[string]*mediaFetch{}}
}

// capacity is how many deliveries the pool may hold at once.
func (p *mediaPool) capacity() int { return mediaHeld * p.workers }

func tenantOf(j *job) string { return cmp.Or(j.msg.Tenant, apikey.DefaultTenant) }

// reserve takes a place for j, before its claim; false when the pool, or
// j's tenant's half of it, is full.
func (p *mediaPool) reserve(j *job) bool {
	if j.media != mediaNone {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	name := tenantOf(j)
	t := p.tenants[name]
	if t == nil {
		t = &tenantMedia{}
		p.tenants[name] = t
	}
	if p.draining || p.held >= p.capacity() || 2*t.held >= p.capacity() {
		if t.held == 0 {
			delete(p.tenants, name)
		}
		return false
	}
	p.held++
	t.held++
	j.media = mediaReserved
	return true
}

// busy is the snooze of a media job the pool has no room for.
func (p *mediaPool) busy(j *job) error {
	wait := mediaBusyWait + time.Duration(rand.Int64N(int64(mediaBusyWait/2))) //nolint:gosec // spreading returns, not a secret
	return Snooze(wait, "the WeCom media pool is full for tenant "+strconv.Quote(tenantOf(j))+
		" (WECOM_MEDIA_CONCURRENCY, WECOM_MEDIA_TENANT_CONCURRENCY)")
}

// unreserve gives back the place of a job that ended before the pool
// took it.
func (p *mediaPool) unreserve(j *job) {
	if j.media != mediaReserved {
		return
	}
	j.media = mediaNone
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releaseLocked(tenantOf(j))
}

func (p *mediaPool) releaseLocked(tenant string) {
	t := p.tenants[tenant]
	p.held--
	t.held--
	if t.held == 0 {
		delete(p.tenants, tenant)
	}
}

// submit hands a reserved job to the pool: it joins the download of its
// file, or starts one now if a worker (and its tenant's share) is free,
// else its download waits its turn.
func (p *mediaPool) submit(ctx context.Context, j *job, m provider.WeCom) error {
	mj := &mediaJob{ctx: ctx, j: j, m: m, tenant: tenantOf(j)}
	md := j.msg.Media
	key := mj.tenant + "\x00" + md.Type + "\x00" + md.URL
	p.mu.Lock()
	defer p.mu.Unlock()
	j.media = mediaSubmitted
	if f := p.fetches[key]; f != nil {
		f.jobs = append(f.jobs, mj)
		return errHandedOn
	}
	f := &mediaFetch{key: key, tenant: mj.tenant, ctx: ctx, md: md, jobs: []*mediaJob{mj}}
	p.fetches[key] = f
	t := p.tenants[mj.tenant]
	if p.running < p.workers && t.running < p.perTenant {
		p.running++
		t.running++
		go p.work(f)
		return errHandedOn
	}
	if len(t.waiting) == 0 {
		p.turn = append(p.turn, mj.tenant)
	}
	t.waiting = append(t.waiting, f)
	return errHandedOn
}

// work downloads f, then the next waiting file whose tenant has room,
// until none is left.
func (p *mediaPool) work(f *mediaFetch) {
	for f != nil {
		file, err := p.d.cfg.Media.Fetch(f.ctx, f.md.URL, f.md.Type)
		p.mu.Lock()
		delete(p.fetches, f.key) // a job of the same file from now on downloads it anew
		jobs := f.jobs
		p.tenants[f.tenant].running--
		f = p.nextLocked()
		if f == nil {
			p.running--
		}
		p.mu.Unlock()
		for _, mj := range jobs {
			go p.finishJob(mj, file, err)
		}
	}
}

// nextLocked takes the next waiting download, tenants in turn, skipping a
// tenant at its share.
func (p *mediaPool) nextLocked() *mediaFetch {
	for i, name := range p.turn {
		t := p.tenants[name]
		if t.running >= p.perTenant {
			continue
		}
		f := t.waiting[0]
		t.waiting = t.waiting[1:]
		p.turn = append(p.turn[:i:i], p.turn[i+1:]...)
		if len(t.waiting) > 0 {
			p.turn = append(p.turn, name) // its next waits behind the others
		}
		t.running++
		return f
	}
	return nil
}

// finishJob is one job after its file's download: the upload, then the
// message's call (or its merge), then finish; then its place is free.
func (p *mediaPool) finishJob(mj *mediaJob, file media.Fetched, err error) {
	defer func() {
		p.mu.Lock()
		p.releaseLocked(mj.tenant)
		p.mu.Unlock()
	}()
	if err == nil {
		err = p.d.uploadMedia(mj.ctx, mj.j.acct, mj.j.msg.Media, file, &mj.m)
	}
	p.d.sendMedia(mj.ctx, mj.j, mj.m, err)
}

// drain sends back (a snooze) every job whose download has not started:
// a stopping consumer finishes what runs, within its grace.
func (p *mediaPool) drain() {
	p.mu.Lock()
	p.draining = true
	var back []*mediaJob
	for _, name := range p.turn {
		t := p.tenants[name]
		for _, f := range t.waiting {
			delete(p.fetches, f.key)
			back = append(back, f.jobs...)
		}
		t.waiting = nil
	}
	p.turn = nil
	p.mu.Unlock()
	for _, mj := range back {
		go p.finishJob(mj, media.Fetched{}, Snooze(time.Second, "the consumer is stopping"))
	}
}

// sendMedia makes a media message's call (or adds it to a merge) once its
// file is uploaded (err: why it could not be), then finishes it.
func (d *Dispatcher) sendMedia(ctx context.Context, j *job, m provider.WeCom, err error) {
	var rcpt provider.Receipt
	if err == nil {
		sctx, cancel := context.WithTimeout(ctx, d.cfg.SendTimeout)
		defer cancel()
		rcpt, err = d.callOrMerge(ctx, sctx, j, m)
		if errors.Is(err, errHandedOn) {
			return // the merged send finishes it
		}
	}
	d.finish(ctx, j, rcpt, err)
}

// wecomMedia fetches a media message's file (through the egress guard,
// within WeCom's limits and Media's rate and time) and uploads it
// (uploadMedia): for a job that is not handed on to the pool.
func (d *Dispatcher) wecomMedia(ctx context.Context, a *account, md *envelope.Media, m *provider.WeCom) error {
	if d.cfg.Media == nil {
		return fmt.Errorf("%w: this consumer cannot send WeCom media", ErrTemplate)
	}
	f, err := d.cfg.Media.Fetch(ctx, md.URL, md.Type)
	if err != nil {
		return err
	}
	return d.uploadMedia(ctx, a, md, f, m)
}

// uploadMedia sets m's media_id for the fetched file f: the one cached for
// the same bytes and name in a's corp, else a fresh upload, made once by
// the fleet (Media.Upload), then cached.
func (d *Dispatcher) uploadMedia(ctx context.Context, a *account, md *envelope.Media, f media.Fetched, m *provider.WeCom) error {
	if d.cfg.Media == nil || a.app == nil {
		return fmt.Errorf("%w: this consumer cannot send WeCom media", ErrTemplate)
	}
	corp := a.app.CorpID
	// The same file for many users at once (single messages about to be
	// merged) is asked for once in this process; Upload makes it once in
	// the fleet.
	id, err := d.uploads.do(corp+"\x00"+md.Type+"\x00"+f.SHA256+"\x00"+md.Filename, func() (string, error) {
		return d.cfg.Media.Upload(ctx, corp, md.Type, f.SHA256, md.Filename, func(uctx context.Context) (string, error) {
			return d.cfg.WeCom.UploadMedia(uctx, a.app, md.Type, md.Filename, f.Size, f.Open)
		})
	})
	if errors.Is(err, media.ErrRedis) {
		return fmt.Errorf("%w: %w", errRedis, err)
	}
	if err != nil {
		return err
	}
	m.Format, m.MediaID = md.Type, id
	return nil
}

// flight runs one call per key at a time in this process; callers with the
// same key while it runs get its result.
type flight struct {
	mu    sync.Mutex
	calls map[string]*flightCall
}

type flightCall struct {
	done chan struct{}
	val  string
	err  error
}

func (f *flight) do(key string, fn func() (string, error)) (string, error) {
	f.mu.Lock()
	if f.calls == nil {
		f.calls = map[string]*flightCall{}
	}
	if c, ok := f.calls[key]; ok {
		f.mu.Unlock()
		<-c.done
		return c.val, c.err
	}
	c := &flightCall{done: make(chan struct{})}
	f.calls[key] = c
	f.mu.Unlock()
	c.val, c.err = fn()
	f.mu.Lock()
	delete(f.calls, key)
	f.mu.Unlock()
	close(c.done)
	return c.val, c.err
}
