package token

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Fetch asks the vendor for a new token and how long it lives.
type Fetch func(ctx context.Context) (token string, lifetime time.Duration, err error)

// Config configures a Source.
type Config struct {
	Prefix string // Redis key prefix (REDIS_PREFIX)
	Name   string // whose token: "wecom:<corpid>:<agentid>"
	// Early is how long before the vendor's expiry the cached token is
	// dropped, so the next send fetches a new one while the old one still
	// works; default 5 minutes, at most half the token's lifetime.
	Early time.Duration
	// LockTTL bounds one fetch; a holder that died frees the lock after it.
	// Default 10 s.
	LockTTL time.Duration
	// Poll is how often a waiter looks for the token another process is
	// fetching; default 20 ms.
	Poll time.Duration
}

// Validate fills defaults and reports the first invalid setting.
func (c *Config) Validate() error {
	if c.Prefix == "" || c.Name == "" {
		return errors.New("token: Prefix and Name are required")
	}
	c.Early = cmp.Or(c.Early, 5*time.Minute)
	c.LockTTL = cmp.Or(c.LockTTL, 10*time.Second)
	c.Poll = cmp.Or(c.Poll, 20*time.Millisecond)
	if c.Early < 0 || c.LockTTL < 10*time.Millisecond || c.Poll <= 0 {
		return fmt.Errorf("token: Early %s, LockTTL %s, Poll %s: out of range", c.Early, c.LockTTL, c.Poll)
	}
	return nil
}

// Source hands out the shared token. It is safe for concurrent use.
type Source struct {
	rdb   redis.UniversalClient
	cfg   Config
	fetch Fetch
	key   string
	lock  string
}

// New validates cfg and returns a Source.
func New(rdb redis.UniversalClient, cfg Config, fetch Fetch) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if fetch == nil {
		return nil, errors.New("token: Fetch is required")
	}
	k := cfg.Prefix + "token:" + cfg.Name
	return &Source{rdb: rdb, cfg: cfg, fetch: fetch, key: k, lock: k + ":lock"}, nil
}

// compare-and-delete: drop KEYS[1] only if it still holds ARGV[1].
var dropIf = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// Token returns the current token, fetching it if no process has.
func (s *Source) Token(ctx context.Context) (string, error) {
	for {
		tok, err := s.rdb.Get(ctx, s.key).Result()
		if err == nil {
			return tok, nil
		}
		if !errors.Is(err, redis.Nil) {
			return "", fmt.Errorf("token: read: %w", err)
		}
		owner := newOwner()
		got, err := s.rdb.SetNX(ctx, s.lock, owner, s.cfg.LockTTL).Result()
		if err != nil {
			return "", fmt.Errorf("token: lock: %w", err)
		}
		if got {
			return s.refresh(ctx, owner)
		}
		// Another process is fetching: wait for its token (or its lock
		// to go, if it failed).
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(s.cfg.Poll):
		}
	}
}

func (s *Source) refresh(ctx context.Context, owner string) (string, error) {
	defer func() { _ = dropIf.Run(context.WithoutCancel(ctx), s.rdb, []string{s.lock}, owner).Err() }()
	// A process may have stored one between our read and our lock.
	if tok, err := s.rdb.Get(ctx, s.key).Result(); err == nil {
		return tok, nil
	}
	tok, life, err := s.fetch(ctx)
	if err != nil {
		return "", err
	}
	keep := life - min(s.cfg.Early, life/2)
	if err := s.rdb.Set(ctx, s.key, tok, max(keep, time.Second)).Err(); err != nil {
		return "", fmt.Errorf("token: store: %w", err)
	}
	return tok, nil
}

// Invalidate drops bad if it is still the current token: the vendor
// refused it (invalid, expired, missing), so the next Token fetches anew.
func (s *Source) Invalidate(ctx context.Context, bad string) error {
	if err := dropIf.Run(ctx, s.rdb, []string{s.key}, bad).Err(); err != nil {
		return fmt.Errorf("token: invalidate: %w", err)
	}
	return nil
}

func newOwner() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
