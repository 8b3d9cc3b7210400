// Package accountstate is the state of WeCom sending accounts that the
// whole fleet shares through Redis: whether an account is down because
// WeCom refused its credentials, the outcomes of its recent sends (its
// health, seed 004's success rate), and the send rate the consumers last
// held it to. Consumers write it; the API reads it for /api/queues/stats
// and its console.
//
// It must never send, never touch AMQP, and never hold a secret: an account
// is known here by its name only.
package accountstate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/msgpulse/msgpulse/internal/redact"
	"github.com/msgpulse/msgpulse/pkg/client"
)

// buckets is how many slices the health window is counted in.
const buckets = 10

// Config configures a Store.
type Config struct {
	Prefix string // REDIS_PREFIX
	// Window is how far back health looks (WECOM_HEALTH_WINDOW); default 5m.
	Window time.Duration
	// DownFor is how long an account stays down after WeCom refused its
	// credentials, before one message probes it again; default 30s.
	DownFor time.Duration
	// CacheFor is how long a consumer reuses a health or down answer
	// instead of asking Redis per message; default 1s.
	CacheFor time.Duration
}

// Validate fills defaults and reports the first invalid setting.
func (c *Config) Validate() error {
	if c.Prefix == "" {
		return errors.New("accountstate: Prefix is required")
	}
	c.Window = cmp.Or(c.Window, 5*time.Minute)
	c.DownFor = cmp.Or(c.DownFor, 30*time.Second)
	c.CacheFor = cmp.Or(c.CacheFor, time.Second)
	if c.Window < time.Second || c.DownFor < 10*time.Millisecond || c.CacheFor < 0 {
		return fmt.Errorf("accountstate: window %s, down for %s: out of range", c.Window, c.DownFor)
	}
	return nil
}

// Store reads and writes account state. It is safe for concurrent use.
type Store struct {
	rdb redis.UniversalClient
	cfg Config
	now func() time.Time
}

// New validates cfg and returns a Store.
func New(rdb redis.UniversalClient, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Store{rdb: rdb, cfg: cfg, now: time.Now}, nil
}

// Window is the health window.
func (s *Store) Window() time.Duration { return s.cfg.Window }

func (s *Store) bucketLen() time.Duration { return s.cfg.Window / buckets }

// Account is one account's state as a consumer keeps it: its keys, built
// once, and its cached answers. A consumer resolves it once per account
// (Store.Account) and keeps it; it is safe for concurrent use.
type Account struct {
	s       *Store
	name    string
	downKey string // its keys
	rateKey string

	health memo[float64]
	down   memo[string]
}

// memo is one answer a consumer reuses for CacheFor instead of asking
// Redis per message.
type memo[T any] struct {
	mu sync.Mutex
	at time.Time
	v  T
}

// get returns the answer if it is younger than maxAge at now.
func (m *memo[T]) get(now time.Time, maxAge time.Duration) (T, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.v, !m.at.IsZero() && now.Sub(m.at) < maxAge
}

func (m *memo[T]) set(now time.Time, v T) {
	m.mu.Lock()
	m.at, m.v = now, v
	m.mu.Unlock()
}

// Account returns account's state; keep it (its answers are cached in it).
func (s *Store) Account(name string) *Account {
	return &Account{s: s, name: name, downKey: downKey(s.cfg.Prefix, name), rateKey: rateKey(s.cfg.Prefix, name)}
}

// MarkDown marks the account down for DownFor, with why (WeCom's words;
// the console and /api/queues/stats show it, so it passes redact.Text).
func (a *Account) MarkDown(ctx context.Context, why string) error {
	why = redact.Text(why)
	if err := a.s.rdb.Set(ctx, a.downKey, why, a.s.cfg.DownFor).Err(); err != nil {
		return fmt.Errorf("accountstate: mark %s down: %w", a.name, err)
	}
	a.down.set(a.s.now(), why)
	return nil
}

// Down returns why the account is down, or "" when it is up. The answer
// may be CacheFor old.
func (a *Account) Down(ctx context.Context) (string, error) {
	if why, ok := a.down.get(a.s.now(), a.s.cfg.CacheFor); ok {
		return why, nil
	}
	why, err := a.s.rdb.Get(ctx, a.downKey).Result()
	if errors.Is(err, redis.Nil) {
		why, err = "", nil
	}
	if err != nil {
		return "", fmt.Errorf("accountstate: is %s down: %w", a.name, err)
	}
	a.down.set(a.s.now(), why)
	return why, nil
}

// Record counts one send of the account in the current slice of the
// window.
func (a *Account) Record(ctx context.Context, ok bool) error {
	s := a.s
	b := s.bucketLen()
	k := sendsKey(s.cfg.Prefix, a.name, s.now().UnixMilli()/b.Milliseconds())
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HIncrBy(ctx, k, "all", 1)
		if ok {
			p.HIncrBy(ctx, k, "ok", 1)
		}
		p.PExpire(ctx, k, s.cfg.Window+2*b)
		return nil
	})
	if err != nil {
		return fmt.Errorf("accountstate: record a send of %s: %w", a.name, err)
	}
	return nil
}

// Health is the success rate of the account's sends in the window, 1 when
// it sent nothing. The answer may be CacheFor old.
func (a *Account) Health(ctx context.Context) (float64, error) {
	if h, ok := a.health.get(a.s.now(), a.s.cfg.CacheFor); ok {
		return h, nil
	}
	all, good, err := a.s.counts(ctx, a.name)
	if err != nil {
		return 0, err
	}
	h := 1.0
	if all > 0 {
		h = float64(good) / float64(all)
	}
	a.health.set(a.s.now(), h)
	return h, nil
}

// NoteRate stores the send rate (per second) the consumers hold the
// account to, for the stats; it is kept for a minute.
func (a *Account) NoteRate(ctx context.Context, perSecond float64) error {
	return a.s.rdb.Set(ctx, a.rateKey, strconv.FormatFloat(perSecond, 'f', 4, 64), time.Minute).Err()
}

// counts sums the window's sends and successes.
func (s *Store) counts(ctx context.Context, account string) (all, ok int64, err error) {
	b := s.bucketLen().Milliseconds()
	now := s.now().UnixMilli() / b
	cmds := make([]*redis.SliceCmd, 0, buckets)
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range int64(buckets) {
			cmds = append(cmds, p.HMGet(ctx, sendsKey(s.cfg.Prefix, account, now-i), "all", "ok"))
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("accountstate: health of %s: %w", account, err)
	}
	for _, c := range cmds {
		v := c.Val()
		if len(v) == 2 {
			all += toInt(v[0])
			ok += toInt(v[1])
		}
	}
	return all, ok, nil
}

func toInt(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// State is one account in /api/queues/stats (wecomAccounts): the
// contract's WeComAccountState. Status is "up" or "down" (WeCom refused its
// credentials; its messages wait until their deadline); DownUntil is when
// the down mark lapses and one message probes the account again; Sends and
// Succeeded count the health window's sends; RatePerSecond is the rate the
// consumers last held the account to (adaptive rate × health).
type State = client.WeComAccountState

// Get reads account's state from Redis (no cache).
func (s *Store) Get(ctx context.Context, account string) (State, error) {
	st := State{Account: account, Status: "up", Health: 1}
	why, err := s.rdb.Get(ctx, downKey(s.cfg.Prefix, account)).Result()
	switch {
	case err == nil:
		st.Status, st.DownReason = "down", redact.Text(why)
		// A read only: PTTL never touches the mark. A mark that lapsed
		// between the two reads (-2) or has no expiry (-1) gets no time.
		if ttl, err := s.rdb.PTTL(ctx, downKey(s.cfg.Prefix, account)).Result(); err == nil && ttl > 0 {
			until := s.now().Add(ttl).UTC().Truncate(time.Millisecond)
			st.DownUntil = &until
		}
	case !errors.Is(err, redis.Nil):
		return st, fmt.Errorf("accountstate: %s: %w", account, err)
	}
	if st.Sends, st.Succeeded, err = s.counts(ctx, account); err != nil {
		return st, err
	}
	if st.Sends > 0 {
		st.Health = float64(st.Succeeded) / float64(st.Sends)
	}
	if v, err := s.rdb.Get(ctx, rateKey(s.cfg.Prefix, account)).Float64(); err == nil {
		st.RatePerSecond = &v
	}
	return st, nil
}
