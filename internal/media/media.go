// Package media fetches the files of WeCom media messages (image, file,
// video) through the callback egress guard, within WeCom's size limits and
// a minimum transfer rate, and caches in Redis the media_id WeCom gave each
// upload, per corp, content (SHA-256 of the bytes), kind and file name, for
// less than its 3-day life: a file sent to a batch, or sent again, is
// uploaded once, by one consumer of the fleet (Upload).
//
// It never sends or uploads a message itself (the WeCom provider does),
// never touches AMQP, and never logs or returns a file's content or URL.
package media

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/msgpulse/msgpulse/internal/egress"
	"github.com/msgpulse/msgpulse/internal/provider"
)

// Kinds and their size limits (WeCom's temporary media).
const (
	Image = "image"
	File  = "file"
	Video = "video"
	// MinBytes is the smallest file WeCom takes.
	MinBytes = 5
)

// MaxBytes is each kind's largest file.
var MaxBytes = map[string]int64{Image: 10 << 20, Video: 10 << 20, File: MaxFileBytes}

// MaxFileBytes is the largest file of any kind: a byte budget smaller than
// it could never hold one (WECOM_MEDIA_TENANT_MAX_BYTES).
const MaxFileBytes = 20 << 20

// MaxCacheTTL is below WeCom's 3-day media life, with room for the send.
const MaxCacheTTL = 71 * time.Hour

// Defaults.
const (
	DefaultFetchTimeout  = 60 * time.Second
	DefaultMinRate       = 20 << 10 // bytes a second
	DefaultRateWindow    = 3 * time.Second
	DefaultUploadTimeout = 60 * time.Second
)

// Config configures a Store.
type Config struct {
	Prefix string
	Egress egress.Policy // CALLBACK_ALLOW_PRIVATE lifts it
	// FetchTimeout bounds one download, whatever its rate
	// (WECOM_MEDIA_FETCH_TIMEOUT); default DefaultFetchTimeout.
	FetchTimeout time.Duration
	// MinRate is the slowest a download may move, in bytes a second,
	// averaged from its start, once RateWindow has passed
	// (WECOM_MEDIA_MIN_RATE); default DefaultMinRate. A download slower
	// than that fails for good: retrying asks the same server again.
	MinRate int64
	// RateWindow is how long a download may take before MinRate holds it
	// (WECOM_MEDIA_RATE_WINDOW); default DefaultRateWindow.
	RateWindow time.Duration
	// UploadTimeout bounds one upload to WeCom, apart from the download
	// (WECOM_MEDIA_UPLOAD_TIMEOUT); default DefaultUploadTimeout.
	UploadTimeout time.Duration
	// CacheTTL is how long a media_id is reused (WECOM_MEDIA_CACHE_TTL);
	// default 60h, at most MaxCacheTTL.
	CacheTTL time.Duration
	// Poll is how often a consumer waiting for another's upload of the
	// same file looks for its media_id; default 100ms.
	Poll time.Duration
}

// Validate fills defaults and reports the first invalid setting.
func (c *Config) Validate() error {
	if c.Prefix == "" {
		return errors.New("media: Prefix is required")
	}
	c.FetchTimeout = cmp.Or(c.FetchTimeout, DefaultFetchTimeout)
	c.MinRate = cmp.Or(c.MinRate, DefaultMinRate)
	c.RateWindow = cmp.Or(c.RateWindow, DefaultRateWindow)
	c.UploadTimeout = cmp.Or(c.UploadTimeout, DefaultUploadTimeout)
	c.CacheTTL = cmp.Or(c.CacheTTL, 60*time.Hour)
	c.Poll = cmp.Or(c.Poll, 100*time.Millisecond)
	if c.CacheTTL < 0 || c.CacheTTL > MaxCacheTTL {
		return fmt.Errorf("media: cache TTL %s: WeCom keeps media 3 days; at most %s", c.CacheTTL, MaxCacheTTL)
	}
	if c.FetchTimeout < 0 || c.MinRate < 0 || c.RateWindow < 0 || c.RateWindow > c.FetchTimeout || c.UploadTimeout < 0 || c.Poll < 0 {
		return fmt.Errorf("media: fetch timeout %s, min rate %d, rate window %s, upload timeout %s: out of range", c.FetchTimeout, c.MinRate, c.RateWindow, c.UploadTimeout)
	}
	return nil
}

// Store fetches files and caches media ids. It is safe for concurrent use.
type Store struct {
	rdb    redis.UniversalClient
	cfg    Config
	client *http.Client
}

// New validates cfg and returns a Store.
func New(rdb redis.UniversalClient, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = cfg.Egress.DialContext(&net.Dialer{Timeout: cfg.RateWindow, KeepAlive: 30 * time.Second})
	t.Proxy = nil // the guard checks the address connected to; a proxy would hide it
	// Fetch bounds each download by its context (FetchTimeout, MinRate).
	return &Store{rdb: rdb, cfg: cfg, client: &http.Client{Transport: t, CheckRedirect: noRedirect}}, nil
}

// noRedirect: a redirect is not followed; the guard would check the new
// address, but a file's URL is the tenant's to get right.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Fetched is a fetched file: its bytes, held once, in the chunks they
// were read into (one when the server said the length), never copied
// again, not for the upload either (Open).
type Fetched struct {
	SHA256 string // hex
	Size   int64
	chunks [][]byte
}

// Open reads the file from its start; each call is a new reader.
func (f Fetched) Open() io.Reader {
	rs := make([]io.Reader, len(f.chunks))
	for i, c := range f.chunks {
		rs[i] = bytes.NewReader(c)
	}
	return io.MultiReader(rs...)
}

// Held is the memory the file holds: its chunks' capacity, never more than
// its kind's MaxBytes, which a caller reserves before the download.
func (f Fetched) Held() int64 {
	var n int64
	for _, c := range f.chunks {
		n += int64(cap(c))
	}
	return n
}

func permanent(code, msg string) error {
	return &provider.Error{Provider: "wecom", Class: provider.Permanent, Code: code, Message: msg}
}

func transient(msg string) error {
	return &provider.Error{Provider: "wecom", Class: provider.Transient, Code: "media_fetch", Message: msg}
}

// errTooSlow cancels a download that moves slower than MinRate.
var errTooSlow = errors.New("too slow")

// Fetch downloads url. It refuses a kind WeCom does not take, a file above
// its kind's limit or below MinBytes, an address the egress guard refuses,
// and a download slower than MinRate (after RateWindow) or longer than
// FetchTimeout: permanent failures, since retrying gets the same file from
// the same server. A server error or a lost connection is transient.
func (s *Store) Fetch(ctx context.Context, url, kind string) (Fetched, error) {
	limit, ok := MaxBytes[kind]
	if !ok {
		return Fetched{}, permanent("media_type", "media type "+strconv.Quote(kind)+" is not image, file or video")
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var got atomic.Int64
	start := time.Now()
	stop := s.watch(cancel, start, &got)
	defer stop()
	tctx, tcancel := context.WithTimeoutCause(ctx, s.cfg.FetchTimeout, errTooSlow)
	defer tcancel()
	req, err := http.NewRequestWithContext(tctx, http.MethodGet, url, nil)
	if err != nil {
		return Fetched{}, permanent("media_url", "media url is not a valid URL")
	}
	failed := func(err error) error {
		switch {
		case errors.Is(context.Cause(tctx), errTooSlow):
			return s.tooSlow(got.Load(), time.Since(start))
		case errors.Is(err, egress.ErrBlocked):
			return permanent("media_blocked", "media url: "+egress.ErrBlocked.Error()+" (CALLBACK_ALLOW_PRIVATE lifts it)")
		}
		// The transport's text names the URL: say what happened, not where.
		return transient("fetching the media file failed (connection)")
	}
	resp, err := s.client.Do(req) //nolint:gosec // the egress guard checks the address dialled
	if err != nil {
		return Fetched{}, failed(err)
	}
	defer func() { _ = resp.Body.Close() }()
	switch {
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		return Fetched{}, transient("media url answered " + resp.Status)
	case resp.StatusCode != http.StatusOK:
		return Fetched{}, permanent("media_fetch", "media url answered "+resp.Status)
	case resp.ContentLength > limit:
		return Fetched{}, permanent("media_too_large", fmt.Sprintf("%s of %d bytes: WeCom takes at most %d", kind, resp.ContentLength, limit))
	}
	f, err := readFile(&counter{r: resp.Body, n: &got}, resp.ContentLength, limit)
	switch {
	case errors.Is(err, errTooLarge):
		return Fetched{}, permanent("media_too_large", fmt.Sprintf("%s above %d bytes: WeCom takes at most that", kind, limit))
	case err != nil:
		return Fetched{}, failed(err)
	case f.Size < MinBytes:
		return Fetched{}, permanent("media_too_small", fmt.Sprintf("%s of %d bytes: WeCom takes at least %d", kind, f.Size, MinBytes))
	}
	return f, nil
}

// errTooLarge: the body goes on past the kind's limit.
var errTooLarge = errors.New("too large")

// Chunks of a body of unknown length: small first, so that a small file
// holds little, growing to readChunkMax.
const (
	readChunkMin = 64 << 10
	readChunkMax = 1 << 20
)

// readFile reads a body of length bytes (-1: unknown) into memory, never
// holding more than limit: a body of known length in one allocation of
// exactly that, one of unknown length in chunks, none reaching past the
// limit. A body past the limit is errTooLarge, found by reading one byte
// more into a scratch byte, not into the file.
func readFile(r io.Reader, length, limit int64) (Fetched, error) {
	var f Fetched
	h := sha256.New()
	next := int64(readChunkMin)
	if length >= 0 {
		next = length
	}
	for f.Size < limit && next > 0 {
		c := make([]byte, min(next, limit-f.Size))
		n, err := io.ReadFull(r, c)
		c = c[:n:len(c)]
		if n > 0 {
			f.chunks = append(f.chunks, c)
			f.Size += int64(n)
			h.Write(c)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			if length >= 0 && f.Size < length {
				return Fetched{}, io.ErrUnexpectedEOF // cut short
			}
			return f.done(h), nil
		}
		if err != nil {
			return Fetched{}, err
		}
		if length >= 0 {
			break
		}
		next = min(2*next, readChunkMax)
	}
	var one [1]byte
	switch n, err := io.ReadFull(r, one[:]); {
	case n > 0:
		return Fetched{}, errTooLarge
	case errors.Is(err, io.EOF):
		return f.done(h), nil
	default:
		return Fetched{}, err
	}
}

func (f Fetched) done(h hash.Hash) Fetched {
	f.SHA256 = hex.EncodeToString(h.Sum(nil))
	return f
}

// watch cancels a download whose average rate since start falls below
// MinRate once RateWindow has passed, checking a few times a window.
func (s *Store) watch(cancel context.CancelCauseFunc, start time.Time, got *atomic.Int64) (stop func()) {
	done := make(chan struct{})
	go func() {
		every := max(s.cfg.RateWindow/4, 10*time.Millisecond)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if took := time.Since(start); took >= s.cfg.RateWindow && float64(got.Load()) < float64(s.cfg.MinRate)*took.Seconds() {
				cancel(errTooSlow)
				return
			}
		}
	}()
	return func() { close(done) }
}

func (s *Store) tooSlow(got int64, took time.Duration) error {
	took = took.Round(100 * time.Millisecond)
	if took >= s.cfg.FetchTimeout {
		return permanent("media_too_slow", fmt.Sprintf("media download too slow: %d bytes in %s, not done within WECOM_MEDIA_FETCH_TIMEOUT (%s)", got, took, s.cfg.FetchTimeout))
	}
	return permanent("media_too_slow", fmt.Sprintf("media download too slow: %d bytes in %s, below WECOM_MEDIA_MIN_RATE (%d bytes/s)", got, took, s.cfg.MinRate))
}

// counter counts what a download has read so far.
type counter struct {
	r io.Reader
	n *atomic.Int64
}

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// Key is the cache key of the media_id of a file in corp: its bytes, kind
// and name (WeCom shows the name a file was uploaded with, so the same
// bytes under another name are another upload). The corp and bytes are the
// hash tag, so that the key and its upload lock share a slot.
func (s *Store) Key(corp, kind, sha, filename string) string {
	name := sha256.Sum256([]byte(filename))
	return s.cfg.Prefix + "wecom:media:{" + corp + ":" + sha + "}:" + kind + ":" + hex.EncodeToString(name[:8])
}

func (s *Store) cached(ctx context.Context, key string) (string, error) {
	id, err := s.rdb.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("media: cache: %w", err)
	}
	return id, nil
}

// ErrRedis wraps a Redis failure of Upload: the caller pauses rather than
// upload without the fleet's cache.
var ErrRedis = errors.New("media: redis")

// compare-and-delete: drop KEYS[1] only if it still holds ARGV[1].
var dropIf = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// Upload returns the media_id of a file in corp: the cached one, or one
// upload's, made once for the whole fleet. One consumer takes the file's
// upload lock and calls upload, within UploadTimeout, then caches the id;
// the others wait for it (or take over if its lock lapses without one).
// Redis failures wrap ErrRedis; upload's errors come back as they are.
func (s *Store) Upload(ctx context.Context, corp, kind, sha, filename string, upload func(context.Context) (string, error)) (string, error) {
	key := s.Key(corp, kind, sha, filename)
	lock := key + ":lock"
	var owner [12]byte
	_, _ = rand.Read(owner[:])
	me := hex.EncodeToString(owner[:])
	// A waiter gives up after an upload's time and a little: the uploader
	// it waits for has its own timeout, and its lock lapses with it.
	wctx, cancel := context.WithTimeout(ctx, s.cfg.UploadTimeout+5*time.Second)
	defer cancel()
	for {
		id, err := s.cached(wctx, key)
		if err != nil || id != "" {
			return id, redisErr(err)
		}
		got, err := s.rdb.SetNX(wctx, lock, me, s.cfg.UploadTimeout+time.Second).Result()
		if err != nil {
			return "", redisErr(err)
		}
		if got {
			return s.uploadOnce(ctx, key, lock, me, upload)
		}
		select {
		case <-wctx.Done():
			return "", &provider.Error{Provider: "wecom", Class: provider.Transient, Code: "upload", Message: "waited " + (s.cfg.UploadTimeout + 5*time.Second).String() + " for another consumer's upload of the same file"}
		case <-time.After(s.cfg.Poll):
		}
	}
}

func (s *Store) uploadOnce(ctx context.Context, key, lock, me string, upload func(context.Context) (string, error)) (string, error) {
	defer func() { _ = dropIf.Run(context.WithoutCancel(ctx), s.rdb, []string{lock}, me).Err() }()
	// Another consumer may have cached one between our read and our lock.
	if id, err := s.cached(ctx, key); err != nil || id != "" {
		return id, redisErr(err)
	}
	uctx, cancel := context.WithTimeout(ctx, s.cfg.UploadTimeout)
	defer cancel()
	id, err := upload(uctx)
	if err != nil {
		return "", err
	}
	if err := s.rdb.Set(context.WithoutCancel(ctx), key, id, s.cfg.CacheTTL).Err(); err != nil {
		// The next send uploads again: costly, not wrong.
		return id, nil //nolint:nilerr // the id is good; only its cache failed
	}
	return id, nil
}

func redisErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrRedis, err)
}
