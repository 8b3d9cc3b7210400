package wecom

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
	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/media"
	"github.com/msgpulse/msgpulse/internal/provider"
)

// mediaPool downloads the files of WeCom media messages off the send path
// (issue 37: one tenant's images, served a byte a second, held every send
// worker for 30 s). A media job is handed off to the pool and its worker
// goes back to the queue. The pool runs at most workers downloads at once,
// at most perTenant of them one tenant's, and keeps the others waiting, in
// turn by tenant; the jobs of one tenant's file (same URL and kind) share
// one download. After its download each job goes on in its own goroutine:
// the upload (WECOM_MEDIA_UPLOAD_TIMEOUT, once per file across the fleet),
// the call or the merge, Task.Finish.
//
// The pool holds at most capacity jobs (mediaHeld per worker), one tenant
// at most half of them, and at most maxBytes of files, one tenant at most
// tenantBytes of them (issue 43: 64 jobs of one tenant, each keeping its
// 20 MB file, and a second copy for the upload, while WeCom took them
// slowly, were 2.5 GB against the manifest's 1 Gi). A file's bytes are
// reserved when its download starts: its kind's limit, which the download
// never passes (media.Fetch), cut to what the file holds once downloaded,
// and given back when its last job has uploaded it. A download with no
// room waits its turn, as for a worker, holding nothing; freed bytes start
// it. A job that comes while the pool or its tenant is at its jobs, or its
// tenant or the pool has no room for one more file of its kind, does not
// wait here but comes back after mediaBusyWait (a snooze, before its
// claim: nothing attempted, nothing recorded, never dropped). So a
// tenant's slow files slow its own media alone: they never take a send
// worker, another tenant's download slot, more than half the room the
// WeCom queues keep for the pool (Pools), or more than its share of the
// bytes.
type mediaPool struct {
	c                     *Channel
	workers, perTenant    int
	maxBytes, tenantBytes int64

	mu       sync.Mutex
	running  int   // downloads under way
	held     int   // jobs reserved: from reserve until finished
	bytes    int64 // reserved by files: from their download's start until their last job has uploaded
	tenants  map[string]*tenantMedia
	turn     []string              // tenants with downloads waiting, in the order they are served
	files    map[string]*mediaFile // by tenant, kind and URL: not downloaded yet
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
	bytes         int64
	waiting       []*mediaFile
}

// mediaFile is one file of a tenant, its bytes, and the jobs that share
// its download: from its first job's reserve until its last job is
// finished.
type mediaFile struct {
	key, tenant string
	md          *envelope.Media
	// Under mu:
	state fileState
	ctx   context.Context // its first submitted job's
	jobs  []*mediaJob     // submitted, waiting for the download
	refs  int             // jobs reserved on it, until each is finished
	bytes int64           // reserved: the kind's limit from its download's start, then what the file holds
	file  media.Fetched   // once downloaded
	err   error           // why it could not be
}

type fileState int8

const (
	fileReserved fileState = iota // jobs reserved on it, none submitted yet
	fileWaiting                   // its download waits for a worker, or for bytes
	fileFetching
	fileDone // downloaded, or failed: a job submitted now goes on at once
)

type mediaJob struct {
	ctx context.Context
	j   *job
	m   provider.WeCom
}

// mediaSlot is a job's place in the pool.
type mediaSlot int8

const (
	mediaNone      mediaSlot = iota
	mediaReserved            // counted in the pool's held, not yet submitted
	mediaSubmitted           // the pool has it, and frees its place
)

func newMediaPool(c *Channel, workers, perTenant int, maxBytes, tenantBytes int64) *mediaPool {
	return &mediaPool{c: c, workers: workers, perTenant: perTenant, maxBytes: maxBytes, tenantBytes: tenantBytes,
		tenants: map[string]*tenantMedia{}, files: map[string]*mediaFile{}}
}

// capacity is how many deliveries the pool may hold at once.
func (p *mediaPool) capacity() int { return mediaHeld * p.workers }

func tenantOf(j *job) string { return cmp.Or(j.Msg.Tenant, apikey.DefaultTenant) }

// reserve takes a place for j, before its claim; when the pool, or j's
// tenant's part of it, has no room for j, or for one more file of its kind
// (unless it shares one already there), it returns the snooze that brings
// j back later.
func (p *mediaPool) reserve(j *job) error {
	if j.media != mediaNone {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	name := tenantOf(j)
	t := p.tenant(name)
	md := j.Msg.Media
	key := name + "\x00" + md.Type + "\x00" + md.URL
	f := p.files[key]
	var busy error
	switch {
	case p.draining:
		busy = channel.Snooze(time.Second, "the consumer is stopping")
	case p.held >= p.capacity() || 2*t.held >= p.capacity():
		busy = p.busy(name, "WECOM_MEDIA_CONCURRENCY, WECOM_MEDIA_TENANT_CONCURRENCY")
	case f == nil:
		if full := p.roomLocked(t, media.MaxBytes[md.Type]); full != "" { // 0 for a kind Fetch refuses unread
			busy = p.busy(name, full)
		}
	}
	if busy != nil {
		p.dropIdleLocked(name)
		return busy
	}
	if f == nil {
		f = &mediaFile{key: key, tenant: name, md: md}
		p.files[key] = f
	}
	f.refs++
	p.held++
	t.held++
	j.media, j.mediaFile = mediaReserved, f
	return nil
}

func (p *mediaPool) tenant(name string) *tenantMedia {
	t := p.tenants[name]
	if t == nil {
		t = &tenantMedia{}
		p.tenants[name] = t
	}
	return t
}

// dropIdleLocked forgets a tenant that holds nothing.
func (p *mediaPool) dropIdleLocked(name string) {
	if t := p.tenants[name]; t != nil && t.held == 0 && t.bytes == 0 {
		delete(p.tenants, name)
	}
}

// roomLocked names the setting that leaves no room for n more bytes of
// t's, or is "".
func (p *mediaPool) roomLocked(t *tenantMedia, n int64) string {
	switch {
	case t.bytes+n > p.tenantBytes:
		return "WECOM_MEDIA_TENANT_MAX_BYTES"
	case p.bytes+n > p.maxBytes:
		return "WECOM_MEDIA_MAX_BYTES"
	}
	return ""
}

// holdLocked sets f's reservation to n bytes (more or fewer than it had).
func (p *mediaPool) holdLocked(f *mediaFile, t *tenantMedia, n int64) {
	p.bytes += n - f.bytes
	t.bytes += n - f.bytes
	f.bytes = n
}

// busy is the snooze of a media job the pool has no room for, naming the
// settings that are full.
func (p *mediaPool) busy(tenant, full string) error {
	wait := mediaBusyWait + time.Duration(rand.Int64N(int64(mediaBusyWait/2))) //nolint:gosec // spreading returns, not a secret
	return channel.Snooze(wait, "the WeCom media pool is full for tenant "+strconv.Quote(tenant)+" ("+full+")")
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
	p.releaseLocked(j)
}

// releaseLocked gives back j's place, and its file's bytes if it was the
// file's last job.
func (p *mediaPool) releaseLocked(j *job) {
	p.dropFileLocked(j)
	name := tenantOf(j)
	t := p.tenants[name]
	p.held--
	t.held--
	p.dropIdleLocked(name)
}

// dropFileLocked ends j's hold on its file: the last job's gives back the
// file's bytes.
func (p *mediaPool) dropFileLocked(j *job) {
	f := j.mediaFile
	if f == nil {
		return
	}
	j.mediaFile = nil
	if f.refs--; f.refs > 0 {
		return
	}
	p.holdLocked(f, p.tenants[f.tenant], 0)
	f.file = media.Fetched{} // what still points at f keeps no bytes
	if p.files[f.key] == f {
		delete(p.files, f.key)
	}
	p.startLocked()
}

// submit hands a reserved job to the pool: it joins the download of its
// file, or starts one now if a worker (and its tenant's share) is free,
// else its download waits its turn; a job whose file is downloaded already
// goes on at once.
func (p *mediaPool) submit(ctx context.Context, j *job, m provider.WeCom) error {
	mj := &mediaJob{ctx: ctx, j: j, m: m}
	p.mu.Lock()
	defer p.mu.Unlock()
	j.media = mediaSubmitted
	f := j.mediaFile
	switch f.state {
	case fileDone:
		go p.finishJob(mj, f.file, f.err)
		return channel.ErrHandedOff
	case fileWaiting, fileFetching:
		f.jobs = append(f.jobs, mj)
		return channel.ErrHandedOff
	}
	f.ctx, f.jobs = ctx, []*mediaJob{mj}
	t := p.tenants[f.tenant]
	if p.running < p.workers && p.startsLocked(f, t) {
		p.running++
		go p.work(f)
		return channel.ErrHandedOff
	}
	p.queueLocked(f, t)
	return channel.ErrHandedOff
}

// queueLocked makes f's download wait its turn.
func (p *mediaPool) queueLocked(f *mediaFile, t *tenantMedia) {
	f.state = fileWaiting
	if len(t.waiting) == 0 {
		p.turn = append(p.turn, f.tenant)
	}
	t.waiting = append(t.waiting, f)
}

// work downloads f, then the next waiting file whose tenant has room,
// until none is left.
func (p *mediaPool) work(f *mediaFile) {
	for f != nil {
		file, err := p.c.cfg.Media.Fetch(f.ctx, f.md.URL, f.md.Type)
		p.mu.Lock()
		jobs := p.doneLocked(f, file, err)
		p.tenants[f.tenant].running--
		f = p.nextLocked()
		if f == nil {
			p.running--
		}
		p.startLocked() // the file may hold less than was reserved for it
		p.mu.Unlock()
		for _, mj := range jobs {
			go p.finishJob(mj, file, err)
		}
	}
}

// doneLocked ends f's download (or its wait for one, with err): its
// reservation becomes what the file holds, and its jobs, returned, go on.
func (p *mediaPool) doneLocked(f *mediaFile, file media.Fetched, err error) []*mediaJob {
	if p.files[f.key] == f {
		delete(p.files, f.key) // a job of the same file from now on downloads it anew
	}
	f.state, f.file, f.err = fileDone, file, err
	p.holdLocked(f, p.tenants[f.tenant], file.Held())
	jobs := f.jobs
	f.jobs = nil
	return jobs
}

// startsLocked starts f's download, its tenant's share of downloads and
// the bytes allowing (the caller has a worker for it): it holds its kind's
// limit from now on.
func (p *mediaPool) startsLocked(f *mediaFile, t *tenantMedia) bool {
	need := media.MaxBytes[f.md.Type]
	if t.running >= p.perTenant || p.roomLocked(t, need) != "" {
		return false
	}
	t.running++
	f.state = fileFetching
	p.holdLocked(f, t, need)
	return true
}

// nextLocked takes the next waiting download, tenants in turn, skipping a
// tenant at its share of downloads or bytes.
func (p *mediaPool) nextLocked() *mediaFile {
	for i, name := range p.turn {
		t := p.tenants[name]
		f := t.waiting[0]
		if !p.startsLocked(f, t) {
			continue
		}
		t.waiting = t.waiting[1:]
		p.turn = append(p.turn[:i:i], p.turn[i+1:]...)
		if len(t.waiting) > 0 {
			p.turn = append(p.turn, name) // its next waits behind the others
		}
		return f
	}
	return nil
}

// startLocked starts the waiting downloads that workers and bytes allow:
// after bytes are given back.
func (p *mediaPool) startLocked() {
	for p.running < p.workers {
		f := p.nextLocked()
		if f == nil {
			return
		}
		p.running++
		go p.work(f)
	}
}

// finishJob is one job after its file's download: the upload, then the
// message's call (or its merge), then Task.Finish. Its hold on the file ends
// with the upload (the file's bytes are free once its last job's has), its
// place in the pool when it is finished.
func (p *mediaPool) finishJob(mj *mediaJob, file media.Fetched, err error) {
	defer func() {
		p.mu.Lock()
		p.releaseLocked(mj.j)
		p.mu.Unlock()
	}()
	if err == nil {
		err = p.c.uploadMedia(mj.ctx, mj.j.acct, mj.j.Msg.Media, file, &mj.m)
	}
	p.mu.Lock()
	p.dropFileLocked(mj.j)
	p.mu.Unlock()
	p.c.sendMedia(mj.ctx, mj.j, mj.m, err)
}

// drain sends back (a snooze) every job whose download has not started:
// a stopping consumer finishes what runs, within its grace.
func (p *mediaPool) drain() {
	stopping := channel.Snooze(time.Second, "the consumer is stopping")
	p.mu.Lock()
	p.draining = true
	var back []*mediaJob
	for _, name := range p.turn {
		t := p.tenants[name]
		for _, f := range t.waiting {
			back = append(back, p.doneLocked(f, media.Fetched{}, stopping)...)
		}
		t.waiting = nil
	}
	p.turn = nil
	p.mu.Unlock()
	for _, mj := range back {
		go p.finishJob(mj, media.Fetched{}, stopping)
	}
}

// holdBytes reserves n bytes of tenant's for a file fetched outside the
// pool (fetchAndUpload); release gives them back. With no room it returns the
// pool's snooze.
func (p *mediaPool) holdBytes(tenant string, n int64) (release func(), err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.tenant(tenant)
	if full := p.roomLocked(t, n); full != "" {
		p.dropIdleLocked(tenant)
		return nil, p.busy(tenant, full)
	}
	f := &mediaFile{tenant: tenant}
	p.holdLocked(f, t, n)
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.holdLocked(f, p.tenant(tenant), 0)
		p.dropIdleLocked(tenant)
		p.startLocked()
	}, nil
}

// sendMedia makes a media message's call (or adds it to a merge) once its
// file is uploaded (err: why it could not be), then finishes it.
func (c *Channel) sendMedia(ctx context.Context, j *job, m provider.WeCom, err error) {
	var rcpt provider.Receipt
	if err == nil {
		sctx, cancel := context.WithTimeout(ctx, c.cfg.SendTimeout)
		defer cancel()
		rcpt, err = c.callOrMerge(ctx, sctx, j, m)
		if errors.Is(err, channel.ErrHandedOff) {
			return // the merged send finishes it
		}
	}
	j.Finish(rcpt, err)
}

// fetchAndUpload fetches a media message's file (through the egress guard,
// within WeCom's limits and Media's rate and time) and uploads it
// (uploadMedia): for a job that is not handed off to the pool. Its bytes
// count in the pool's all the same, reserved before the download; with no
// room the job comes back later (a snooze).
func (c *Channel) fetchAndUpload(ctx context.Context, j *job, m *provider.WeCom) error {
	md := j.Msg.Media
	if c.cfg.Media == nil {
		return fmt.Errorf("%w: this consumer cannot send WeCom media", channel.ErrTemplate)
	}
	release, err := c.media.holdBytes(tenantOf(j), media.MaxBytes[md.Type])
	if err != nil {
		return err
	}
	defer release()
	f, err := c.cfg.Media.Fetch(ctx, md.URL, md.Type)
	if err != nil {
		return err
	}
	return c.uploadMedia(ctx, j.acct, md, f, m)
}

// uploadMedia sets m's media_id for the fetched file f: the one cached for
// the same bytes and name in a's corp, else a fresh upload, made once by
// the fleet (Media.Upload), then cached.
func (c *Channel) uploadMedia(ctx context.Context, a *account, md *envelope.Media, f media.Fetched, m *provider.WeCom) error {
	if c.cfg.Media == nil || a.app == nil {
		return fmt.Errorf("%w: this consumer cannot send WeCom media", channel.ErrTemplate)
	}
	corp := a.app.CorpID
	// The same file for many users at once (single messages about to be
	// merged) is asked for once in this process; Upload makes it once in
	// the fleet.
	id, err := c.uploads.do(corp+"\x00"+md.Type+"\x00"+f.SHA256+"\x00"+md.Filename, func() (string, error) {
		return c.cfg.Media.Upload(ctx, corp, md.Type, f.SHA256, md.Filename, func(uctx context.Context) (string, error) {
			return c.cfg.Client.UploadMedia(uctx, a.app, md.Type, md.Filename, f.Size, f.Open)
		})
	})
	if errors.Is(err, media.ErrRedis) {
		return fmt.Errorf("%w: %w", channel.ErrRedis, err)
	}
	if err != nil {
		return err
	}
	m.Format, m.MediaID = md.Type, id
	return nil
}
