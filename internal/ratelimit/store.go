package ratelimit

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

var (
	// ErrNotFound: no config has that id.
	ErrNotFound = errors.New("ratelimit: config not found")
	// ErrExists: Create was given an id that is taken.
	ErrExists = errors.New("ratelimit: config already exists")
	// ErrTooMany: Create would make more than MaxConfigs.
	ErrTooMany = errors.New("ratelimit: too many configs")
)

// StoreConfig configures a ConfigStore.
type StoreConfig struct {
	// RefreshEvery is the safety-net reload period, for a change whose
	// notification was lost (pub/sub is fire-and-forget). Default 30s.
	RefreshEvery time.Duration
}

// Validate fills defaults and reports the first invalid setting.
func (c *StoreConfig) Validate() error {
	c.RefreshEvery = cmp.Or(c.RefreshEvery, 30*time.Second)
	if c.RefreshEvery < 10*time.Millisecond {
		return fmt.Errorf("ratelimit: RefreshEvery %s: must be at least 10ms", c.RefreshEvery)
	}
	return nil
}

// How often a silent subscription is pinged, and how soon a failed reload is
// retried: both bound how stale the cache can get when Redis misbehaves.
const (
	healthEvery    = 5 * time.Second
	reloadRetry    = time.Second
	resubscribeMin = 100 * time.Millisecond
	resubscribeMax = 5 * time.Second
)

// MaxConfigs bounds the rate-limit configs: every API and consumer process
// holds every config's rules in memory, and an admin (or an admin key in
// the wrong hands) must not grow that without bound (issue 43).
const MaxConfigs = 1000

// ConfigStore keeps the rate-limit configs in one Redis hash (field = id,
// value = JSON) and, once Run, an in-memory copy that every replica keeps
// current through a pub/sub channel.
type ConfigStore struct {
	rdb     redis.UniversalClient
	hash    string
	channel string
	log     *zap.Logger
	cfg     StoreConfig

	rules     atomic.Pointer[map[string][]Rule] // provider ("" = global) -> rules
	ready     chan struct{}
	readyOnce sync.Once
	running   atomic.Bool
}

// NewConfigStore returns a store whose keys and channel start with prefix.
func NewConfigStore(rdb redis.UniversalClient, prefix string, log *zap.Logger, cfg StoreConfig) (*ConfigStore, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &ConfigStore{
		rdb:     rdb,
		hash:    configsKey(prefix),
		channel: configsChannel(prefix),
		log:     log.Named("ratelimit-configs"),
		cfg:     cfg,
		ready:   make(chan struct{}),
	}, nil
}

// Each change is one script so that the write and its notification cannot be
// separated by a crash: a reader that hears of a change always finds it.
var (
	createScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then return -1 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PUBLISH', ARGV[3], 'create:' .. ARGV[1])
return 1`)
	updateScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PUBLISH', ARGV[3], 'update:' .. ARGV[1])
return 1`)
	deleteScript = redis.NewScript(`
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('PUBLISH', ARGV[2], 'delete:' .. ARGV[1])
return 1`)
)

// List returns every config, sorted by id. A stored value that no longer
// decodes or validates makes it fail, naming the id, rather than hide it from
// the admin.
func (s *ConfigStore) List(ctx context.Context) ([]Config, error) {
	cs, bad, err := s.load(ctx)
	if err != nil {
		return nil, err
	}
	if len(bad) > 0 {
		return nil, errors.Join(bad...)
	}
	return cs, nil
}

func (s *ConfigStore) load(ctx context.Context) (cs []Config, bad []error, err error) {
	m, err := s.rdb.HGetAll(ctx, s.hash).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("ratelimit: list configs: %w", err)
	}
	for id, v := range m {
		c, err := decode(id, v)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		cs = append(cs, c)
	}
	slices.SortFunc(cs, func(a, b Config) int { return cmp.Compare(a.ID, b.ID) })
	return cs, bad, nil
}

func decode(id, v string) (Config, error) {
	var c Config
	if err := json.Unmarshal([]byte(v), &c); err != nil {
		return Config{}, fmt.Errorf("ratelimit: config %q: decode: %w", id, err)
	}
	if c.ID != id {
		return Config{}, fmt.Errorf("ratelimit: config %q: stored under the id of %q", c.ID, id)
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("ratelimit: config %q: %w", id, err)
	}
	return c, nil
}

// Get returns one config, or ErrNotFound.
func (s *ConfigStore) Get(ctx context.Context, id string) (Config, error) {
	v, err := s.rdb.HGet(ctx, s.hash, id).Result()
	if errors.Is(err, redis.Nil) {
		return Config{}, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	if err != nil {
		return Config{}, fmt.Errorf("ratelimit: get config %q: %w", id, err)
	}
	return decode(id, v)
}

// Create stores a new config, generating its id when empty; ErrExists if the
// id is taken.
func (s *ConfigStore) Create(ctx context.Context, c Config) (Config, error) {
	if c.ID == "" {
		c.ID = "cfg-" + strings.ToLower(rand.Text()[:12])
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	b, err := json.Marshal(c)
	if err != nil {
		return Config{}, err
	}
	n, err := createScript.Run(ctx, s.rdb, []string{s.hash}, c.ID, string(b), s.channel, MaxConfigs).Int()
	switch {
	case err != nil:
		return Config{}, fmt.Errorf("ratelimit: create config %q: %w", c.ID, err)
	case n == 0:
		return Config{}, fmt.Errorf("%w: %q", ErrExists, c.ID)
	case n < 0:
		return Config{}, fmt.Errorf("%w: %d configs exist; delete one first", ErrTooMany, MaxConfigs)
	}
	return c, nil
}

// Update replaces an existing config; ErrNotFound if there is none.
func (s *ConfigStore) Update(ctx context.Context, c Config) (Config, error) {
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	ok, err := s.write(ctx, updateScript, c)
	if err != nil {
		return Config{}, fmt.Errorf("ratelimit: update config %q: %w", c.ID, err)
	}
	if !ok {
		return Config{}, fmt.Errorf("%w: %q", ErrNotFound, c.ID)
	}
	return c, nil
}

func (s *ConfigStore) write(ctx context.Context, script *redis.Script, c Config) (bool, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return false, err
	}
	n, err := script.Run(ctx, s.rdb, []string{s.hash}, c.ID, string(b), s.channel).Int()
	return n == 1, err
}

// Delete removes a config; ErrNotFound if there is none. Its rule's log
// stays until it expires on its own.
func (s *ConfigStore) Delete(ctx context.Context, id string) error {
	n, err := deleteScript.Run(ctx, s.rdb, []string{s.hash}, id, s.channel).Int()
	if err != nil {
		return fmt.Errorf("ratelimit: delete config %q: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	return nil
}

// Ready is closed after the cache's first successful load. Until then Rules
// returns nothing, so a server should wait for it (with a timeout) before it
// takes traffic.
func (s *ConfigStore) Ready() <-chan struct{} { return s.ready }

// WaitReady waits up to within for the first load. It returns ctx's error
// if ctx ends first, which a caller that is stopping treats as no error.
func (s *ConfigStore) WaitReady(ctx context.Context, within time.Duration) error {
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-s.ready:
		return nil
	case <-t.C:
		return fmt.Errorf("rate-limit configs did not load from Redis within %s", within)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Rules returns the rules of the enabled configs for provider, from the
// cache: provider "" gives the global configs, any other the configs of that
// provider. The slice is the caller's; the Windows in it are shared and must
// not be modified.
func (s *ConfigStore) Rules(provider string) []Rule {
	m := s.rules.Load()
	if m == nil {
		return nil
	}
	return slices.Clone((*m)[provider])
}

func (s *ConfigStore) reload(ctx context.Context) error {
	cs, bad, err := s.load(ctx)
	if err != nil {
		return err
	}
	for _, err := range bad {
		// Serving the valid configs beats refusing all of them.
		s.log.Warn("skipping invalid rate-limit config", zap.Error(err))
	}
	m := make(map[string][]Rule)
	for _, c := range cs {
		p := ""
		if c.Provider != nil {
			p = *c.Provider
		}
		m[p] = append(m[p], c.Rules()...)
	}
	s.rules.Store(&m)
	s.readyOnce.Do(func() { close(s.ready) })
	return nil
}

// Run keeps the cache current until ctx ends, then returns nil. It loads once
// subscribed (so no change can slip between the load and the subscription),
// reloads on every change notification and every (re)subscription, and every
// RefreshEvery regardless. Redis errors are logged and retried, never
// returned. Run may be called only once at a time.
func (s *ConfigStore) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("ratelimit: ConfigStore.Run is already running")
	}
	defer s.running.Store(false)

	backoff := resubscribeMin
	for {
		subscribed, err := s.listen(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if subscribed {
			backoff = resubscribeMin
		}
		s.log.Warn("config subscription lost; resubscribing", zap.Error(err), zap.Duration("in", backoff))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(backoff*2, resubscribeMax)
	}
}

// listen runs one subscription until it fails or ctx ends. It uses its own
// PubSub per attempt so that a resubscription is always visible (as a
// subscribe confirmation) and always followed by a reload.
func (s *ConfigStore) listen(ctx context.Context) (subscribed bool, err error) {
	ps := s.rdb.Subscribe(ctx, s.channel)
	defer func() { _ = ps.Close() }() // also closed by the AfterFunc; the second close only reports that
	// A blocked Receive ignores ctx cancellation; closing the PubSub ends it.
	closed := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(closed)
		_ = ps.Close()
	})
	defer func() {
		if !stop() {
			<-closed
		}
	}()

	nextReload := time.Now().Add(s.cfg.RefreshEvery)
	lastHeard := time.Now()
	var pingedAt time.Time // zero when no ping is outstanding
	for {
		if !time.Now().Before(nextReload) {
			nextReload = s.reloadLogged(ctx)
		}
		wait := min(time.Until(nextReload), healthEvery)
		msg, err := ps.ReceiveTimeout(ctx, max(wait, time.Millisecond))
		if err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() || ctx.Err() != nil {
				return subscribed, fmt.Errorf("receive: %w", err)
			}
			// A dead peer can leave Receive waiting forever with the
			// subscription silently gone: after healthEvery of silence
			// demand a pong, and give up on the connection without one.
			switch {
			case pingedAt.IsZero() && time.Since(lastHeard) >= healthEvery:
				if err := ps.Ping(ctx); err != nil {
					return subscribed, fmt.Errorf("ping: %w", err)
				}
				pingedAt = time.Now()
			case !pingedAt.IsZero() && time.Since(pingedAt) >= healthEvery:
				return subscribed, errors.New("no reply to ping")
			}
			continue
		}
		lastHeard, pingedAt = time.Now(), time.Time{}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				subscribed = true
				nextReload = s.reloadLogged(ctx)
			}
		case *redis.Message:
			nextReload = s.reloadLogged(ctx)
		}
	}
}

// reloadLogged reloads and returns when the next periodic reload is due:
// soon when this one failed.
func (s *ConfigStore) reloadLogged(ctx context.Context) time.Time {
	if err := s.reload(ctx); err != nil {
		if ctx.Err() == nil {
			s.log.Warn("reloading rate-limit configs failed", zap.Error(err))
		}
		return time.Now().Add(min(reloadRetry, s.cfg.RefreshEvery))
	}
	return time.Now().Add(s.cfg.RefreshEvery)
}
