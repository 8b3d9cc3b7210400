// Package media fetches the files of WeCom media messages (image, file,
// video) through the callback egress guard, within WeCom's size limits,
// and caches in Redis the media_id WeCom gave each upload, per corp and
// content (SHA-256 of the bytes), for less than its 3-day life: a file
// sent to a batch, or sent again, is uploaded once.
//
// It never sends or uploads a message itself (the WeCom provider does),
// never touches AMQP, and never logs a file's content or URL query.
package media

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
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
var MaxBytes = map[string]int64{Image: 10 << 20, Video: 10 << 20, File: 20 << 20}

// MaxCacheTTL is below WeCom's 3-day media life, with room for the send.
const MaxCacheTTL = 71 * time.Hour

// Config configures a Store.
type Config struct {
	Prefix string
	Egress egress.Policy // CALLBACK_ALLOW_PRIVATE lifts it
	// Timeout bounds one fetch; default 30s.
	Timeout time.Duration
	// CacheTTL is how long a media_id is reused (WECOM_MEDIA_CACHE_TTL);
	// default 60h, at most MaxCacheTTL.
	CacheTTL time.Duration
}

// Validate fills defaults and reports the first invalid setting.
func (c *Config) Validate() error {
	if c.Prefix == "" {
		return errors.New("media: Prefix is required")
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	if c.CacheTTL == 0 {
		c.CacheTTL = 60 * time.Hour
	}
	if c.CacheTTL < 0 || c.CacheTTL > MaxCacheTTL {
		return fmt.Errorf("media: cache TTL %s: WeCom keeps media 3 days; at most %s", c.CacheTTL, MaxCacheTTL)
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
	t.DialContext = cfg.Egress.DialContext(&net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second})
	t.Proxy = nil // the guard checks the address connected to; a proxy would hide it
	return &Store{rdb: rdb, cfg: cfg, client: &http.Client{Timeout: cfg.Timeout, Transport: t}}, nil
}

// Fetched is a fetched file.
type Fetched struct {
	Data   []byte
	SHA256 string // hex
}

func permanent(code, msg string) error {
	return &provider.Error{Provider: "wecom", Class: provider.Permanent, Code: code, Message: msg}
}

// Fetch downloads url, refusing a kind WeCom does not take, a file above
// its kind's limit or below MinBytes (permanent failures: retrying gives
// the same file), an address the egress guard refuses (permanent), and
// treating a server error or timeout as transient.
func (s *Store) Fetch(ctx context.Context, url, kind string) (Fetched, error) {
	limit, ok := MaxBytes[kind]
	if !ok {
		return Fetched{}, permanent("media_type", "media type "+strconv.Quote(kind)+" is not image, file or video")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Fetched{}, permanent("media_url", "media url: "+err.Error())
	}
	resp, err := s.client.Do(req)
	if err != nil {
		if errors.Is(err, egress.ErrBlocked) {
			return Fetched{}, permanent("media_blocked", "media url: "+egress.ErrBlocked.Error()+" (CALLBACK_ALLOW_PRIVATE lifts it)")
		}
		return Fetched{}, &provider.Error{Provider: "wecom", Class: provider.Transient, Code: "media_fetch", Message: "fetching the media file failed"}
	}
	defer func() { _ = resp.Body.Close() }()
	switch {
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		return Fetched{}, &provider.Error{Provider: "wecom", Class: provider.Transient, Code: "media_fetch", Message: "media url answered " + resp.Status}
	case resp.StatusCode != http.StatusOK:
		return Fetched{}, permanent("media_fetch", "media url answered "+resp.Status)
	case resp.ContentLength > limit:
		return Fetched{}, permanent("media_too_large", fmt.Sprintf("%s of %d bytes: WeCom takes at most %d", kind, resp.ContentLength, limit))
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return Fetched{}, &provider.Error{Provider: "wecom", Class: provider.Transient, Code: "media_fetch", Message: "reading the media file failed"}
	}
	switch {
	case int64(len(data)) > limit:
		return Fetched{}, permanent("media_too_large", fmt.Sprintf("%s above %d bytes: WeCom takes at most that", kind, limit))
	case len(data) < MinBytes:
		return Fetched{}, permanent("media_too_small", fmt.Sprintf("%s of %d bytes: WeCom takes at least %d", kind, len(data), MinBytes))
	}
	sum := sha256.Sum256(data)
	return Fetched{Data: data, SHA256: hex.EncodeToString(sum[:])}, nil
}

// Key is the cache key of a file's media_id in corp.
func (s *Store) Key(corp, kind, sha string) string {
	return s.cfg.Prefix + "wecom:media:{" + corp + "}:" + kind + ":" + sha
}

// Cached returns the media_id cached for the file in corp, or "".
func (s *Store) Cached(ctx context.Context, corp, kind, sha string) (string, error) {
	id, err := s.rdb.Get(ctx, s.Key(corp, kind, sha)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("media: cache: %w", err)
	}
	return id, nil
}

// Remember caches a media_id for CacheTTL.
func (s *Store) Remember(ctx context.Context, corp, kind, sha, mediaID string) error {
	if err := s.rdb.Set(ctx, s.Key(corp, kind, sha), mediaID, s.cfg.CacheTTL).Err(); err != nil {
		return fmt.Errorf("media: cache: %w", err)
	}
	return nil
}
