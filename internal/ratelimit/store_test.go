package ratelimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

type storeEnv struct {
	r   *testenv.Redis
	ctx context.Context
}

func setupStores(t *testing.T) storeEnv {
	t.Helper()
	return storeEnv{r: testenv.NewRedis(t), ctx: testenv.Context(t, 60*time.Second)}
}

// newStore returns a store on its own named connection pool (so a test can
// find and kill its subscription), not running.
func (e storeEnv) newStore(t *testing.T, name string, refresh time.Duration) *ratelimit.ConfigStore {
	t.Helper()
	c, err := rdb.Open(e.r.Mode, e.r.URL, rdb.WithClientName(name))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	s, err := ratelimit.NewConfigStore(c, e.r.Prefix, zaptest.NewLogger(t), ratelimit.StoreConfig{RefreshEvery: refresh})
	require.NoError(t, err)
	return s
}

// run starts s.Run and waits until it is ready; cleanup stops it and checks
// that it returned.
func run(t *testing.T, s *ratelimit.ConfigStore) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("ConfigStore.Run did not stop with its context")
		}
	})
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatalf("Run returned before ready: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("ConfigStore not ready")
	}
}

func ruleNames(rs []ratelimit.Rule) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Name)
	}
	slices.Sort(out)
	return out
}

func TestConfigStoreCRUD(t *testing.T) {
	t.Parallel()
	e := setupStores(t)
	s := e.newStore(t, "crud-"+testenv.ID(), 0)

	global := ratelimit.Config{ID: "global", RequestsPerSecond: 10, RequestsPerDay: 1000, IsEnabled: true}
	got, err := s.Create(e.ctx, global)
	require.NoError(t, err)
	require.Equal(t, global, got)

	gen, err := s.Create(e.ctx, ratelimit.Config{Provider: ptr("aliyun"), RequestsPerMinute: 5, IsEnabled: true})
	require.NoError(t, err)
	require.Regexp(t, regexp.MustCompile(`^[a-z0-9_-]{1,64}$`), gen.ID)
	require.NoError(t, gen.Validate())

	errCases := []struct {
		name string
		op   func() error
		is   error // nil = any error that is neither ErrExists nor ErrNotFound
	}{
		{"create taken id", func() error { _, err := s.Create(e.ctx, global); return err }, ratelimit.ErrExists},
		{"create invalid", func() error {
			_, err := s.Create(e.ctx, ratelimit.Config{ID: "bad", RequestsPerSecond: -1})
			return err
		}, nil},
		{"get missing", func() error { _, err := s.Get(e.ctx, "nope"); return err }, ratelimit.ErrNotFound},
		{"update missing", func() error { _, err := s.Update(e.ctx, ratelimit.Config{ID: "nope"}); return err }, ratelimit.ErrNotFound},
		{"update invalid", func() error {
			_, err := s.Update(e.ctx, ratelimit.Config{ID: "global", RequestsPerSecond: 5, RequestsPerMinute: 1})
			return err
		}, nil},
		{"delete missing", func() error { return s.Delete(e.ctx, "nope") }, ratelimit.ErrNotFound},
	}
	for _, tc := range errCases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.op()
			require.Error(t, err)
			if tc.is != nil {
				require.ErrorIs(t, err, tc.is)
				return
			}
			require.NotErrorIs(t, err, ratelimit.ErrExists)
			require.NotErrorIs(t, err, ratelimit.ErrNotFound)
		})
	}
	_, err = s.Get(e.ctx, "bad")
	require.ErrorIs(t, err, ratelimit.ErrNotFound, "an invalid config was stored")

	got, err = s.Get(e.ctx, "global")
	require.NoError(t, err)
	require.Equal(t, global, got, "a rejected update changed the config")

	updated := global
	updated.RequestsPerDay, updated.IsEnabled = 2000, false
	got, err = s.Update(e.ctx, updated)
	require.NoError(t, err)
	require.Equal(t, updated, got)
	got, err = s.Get(e.ctx, "global")
	require.NoError(t, err)
	require.Equal(t, updated, got)

	list, err := s.List(e.ctx)
	require.NoError(t, err)
	want := []ratelimit.Config{gen, updated}
	slices.SortFunc(want, func(a, b ratelimit.Config) int { return strings.Compare(a.ID, b.ID) })
	require.Equal(t, want, list)

	require.NoError(t, s.Delete(e.ctx, "global"))
	_, err = s.Get(e.ctx, "global")
	require.ErrorIs(t, err, ratelimit.ErrNotFound)
	list, err = s.List(e.ctx)
	require.NoError(t, err)
	require.Equal(t, []ratelimit.Config{gen}, list)
}

// A change made through one instance reaches the other's cache within one
// second. RefreshEvery is an hour, so only the change notification can do it.
// An admin cannot grow every process's rules without bound (issue 43):
// past MaxConfigs a create is refused with ErrTooMany and stores nothing,
// and a delete makes room again.
func TestConfigStoreHoldsAtMostMaxConfigs(t *testing.T) {
	t.Parallel()
	e := setupStores(t)
	s := e.newStore(t, "max-"+testenv.ID(), 0)
	fields := make([]any, 0, 2*(ratelimit.MaxConfigs-1))
	for i := range ratelimit.MaxConfigs - 1 {
		id := fmt.Sprintf("fill-%04d", i)
		b, err := json.Marshal(ratelimit.Config{ID: id, RequestsPerMinute: 5, IsEnabled: true})
		require.NoError(t, err)
		fields = append(fields, id, string(b))
	}
	require.NoError(t, e.r.Client.HSet(e.ctx, e.r.Prefix+"ratelimit:configs", fields...).Err())
	_, err := s.Create(e.ctx, ratelimit.Config{ID: "last", RequestsPerMinute: 5, IsEnabled: true})
	require.NoError(t, err, "the 1000th fits")
	_, err = s.Create(e.ctx, ratelimit.Config{ID: "one-too-many", RequestsPerMinute: 5, IsEnabled: true})
	require.ErrorIs(t, err, ratelimit.ErrTooMany)
	_, err = s.Get(e.ctx, "one-too-many")
	require.ErrorIs(t, err, ratelimit.ErrNotFound, "nothing stored")
	_, err = s.Create(e.ctx, ratelimit.Config{ID: "last", RequestsPerMinute: 5, IsEnabled: true})
	require.ErrorIs(t, err, ratelimit.ErrExists, "a taken id is still said to be taken")
	require.NoError(t, s.Delete(e.ctx, "fill-0000"))
	_, err = s.Create(e.ctx, ratelimit.Config{ID: "one-too-many", RequestsPerMinute: 5, IsEnabled: true})
	require.NoError(t, err, "room again after a delete")
}

func TestConfigStorePropagatesWithinOneSecond(t *testing.T) {
	t.Parallel()
	e := setupStores(t)
	a := e.newStore(t, "a-"+testenv.ID(), time.Hour)
	b := e.newStore(t, "b-"+testenv.ID(), time.Hour)
	run(t, a)
	run(t, b)
	require.Empty(t, a.Rules(""))

	steps := []struct {
		name     string
		change   func() error
		provider string
		want     []string
	}{
		{"create global via a", func() error {
			_, err := a.Create(e.ctx, ratelimit.Config{ID: "g", RequestsPerHour: 100, IsEnabled: true})
			return err
		}, "", []string{"rate limit g"}},
		{"create provider via b", func() error {
			_, err := b.Create(e.ctx, ratelimit.Config{ID: "p", Provider: ptr("aliyun"), RequestsPerSecond: 3, IsEnabled: true})
			return err
		}, "aliyun", []string{"rate limit p (provider aliyun)"}},
		{"global rules exclude providers", func() error { return nil }, "", []string{"rate limit g"}},
		{"disable global via b", func() error {
			_, err := b.Update(e.ctx, ratelimit.Config{ID: "g", RequestsPerHour: 100})
			return err
		}, "", nil},
		{"delete provider via a", func() error { return a.Delete(e.ctx, "p") }, "aliyun", nil},
	}
	for _, st := range steps {
		require.NoError(t, st.change(), st.name)
		for name, s := range map[string]*ratelimit.ConfigStore{"a": a, "b": b} {
			testenv.WaitFor(t, time.Second, st.name+": seen by "+name, func() bool {
				return slices.Equal(st.want, ruleNames(s.Rules(st.provider)))
			})
		}
	}
}

func TestConfigStoreRulesByProvider(t *testing.T) {
	t.Parallel()
	e := setupStores(t)
	s := e.newStore(t, "s-"+testenv.ID(), time.Hour)
	for _, c := range []ratelimit.Config{
		{ID: "g1", RequestsPerSecond: 1, IsEnabled: true},
		{ID: "g2", RequestsPerDay: 1, IsEnabled: true},
		{ID: "g-off", RequestsPerDay: 1},
		{ID: "g-unlimited", IsEnabled: true},
		{ID: "a1", Provider: ptr("aliyun"), RequestsPerMinute: 1, IsEnabled: true},
		{ID: "a-off", Provider: ptr("aliyun"), RequestsPerMinute: 1},
		{ID: "t1", Provider: ptr("tencent"), RequestsPerHour: 1, IsEnabled: true},
	} {
		_, err := s.Create(e.ctx, c)
		require.NoError(t, err)
	}
	run(t, s)
	tests := []struct {
		provider string
		want     []string
	}{
		{"", []string{"rate limit g1", "rate limit g2"}},
		{"aliyun", []string{"rate limit a1 (provider aliyun)"}},
		{"tencent", []string{"rate limit t1 (provider tencent)"}},
		{"other", nil},
	}
	for _, tc := range tests {
		t.Run("provider "+tc.provider, func(t *testing.T) {
			require.Equal(t, tc.want, ruleNames(s.Rules(tc.provider)))
		})
	}
	// The returned slice is the caller's: changing it leaves the cache alone.
	rs := s.Rules("")
	rs[0].Name = "mine"
	require.Equal(t, []string{"rate limit g1", "rate limit g2"}, ruleNames(s.Rules("")))
}

// A lost notification is repaired by the periodic reload; a stored config
// that no longer validates is skipped by the cache but reported by List.
func TestConfigStorePeriodicReload(t *testing.T) {
	t.Parallel()
	e := setupStores(t)
	s := e.newStore(t, "s-"+testenv.ID(), 200*time.Millisecond)
	run(t, s)
	hash := e.r.Prefix + "ratelimit:configs"
	require.NoError(t, e.r.Client.HSet(e.ctx, hash,
		"silent", `{"id":"silent","provider":null,"requestsPerSecond":1,"isEnabled":true}`,
		"broken", `{"id":"broken","requestsPerSecond":-5,"isEnabled":true}`,
	).Err())
	testenv.WaitFor(t, 5*time.Second, "periodic reload picks up an unannounced change", func() bool {
		return slices.Equal([]string{"rate limit silent"}, ruleNames(s.Rules("")))
	})
	_, err := s.List(e.ctx)
	require.ErrorContains(t, err, `"broken"`)
}

// After its subscription connection dies the store resubscribes and reloads,
// catching changes made while it was deaf.
func TestConfigStoreReloadsAfterResubscribe(t *testing.T) {
	t.Parallel()
	e := setupStores(t)
	name := "resub-" + testenv.ID()
	s := e.newStore(t, name, time.Hour)
	run(t, s)

	require.NoError(t, e.r.Client.HSet(e.ctx, e.r.Prefix+"ratelimit:configs",
		"missed", `{"id":"missed","provider":null,"requestsPerSecond":1,"isEnabled":true}`).Err())
	killed := 0
	kill := func(ctx context.Context, node redis.UniversalClient) error {
		list, err := node.Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub").Text()
		require.NoError(t, err)
		for line := range strings.Lines(list) {
			if !strings.Contains(line, " name="+name+" ") {
				continue
			}
			id := strings.TrimPrefix(strings.Fields(line)[0], "id=")
			require.NoError(t, node.Do(ctx, "CLIENT", "KILL", "ID", id).Err())
			killed++
		}
		return nil
	}
	if cc, ok := e.r.Client.(*redis.ClusterClient); ok { // the subscription is on one of the nodes
		require.NoError(t, cc.ForEachShard(e.ctx, func(ctx context.Context, n *redis.Client) error { return kill(ctx, n) }))
	} else {
		require.NoError(t, kill(e.ctx, e.r.Client))
	}
	require.Equal(t, 1, killed, "the store's subscription connection")
	testenv.WaitFor(t, 10*time.Second, "reload after resubscribing", func() bool {
		return slices.Equal([]string{"rate limit missed"}, ruleNames(s.Rules("")))
	})
}

func TestConfigStoreRunOnce(t *testing.T) {
	t.Parallel()
	e := setupStores(t)
	s := e.newStore(t, "s-"+testenv.ID(), 0)
	select {
	case <-s.Ready():
		t.Fatal("ready before any load")
	default:
	}
	require.Empty(t, s.Rules(""))
	run(t, s)
	err := s.Run(e.ctx)
	require.Error(t, err)
	require.False(t, errors.Is(err, context.Canceled))
}

func TestStoreConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      time.Duration
		want    time.Duration
		wantErr bool
	}{
		{0, 30 * time.Second, false},
		{time.Second, time.Second, false},
		{time.Millisecond, 0, true},
		{-time.Second, 0, true},
	}
	for _, tc := range tests {
		c := ratelimit.StoreConfig{RefreshEvery: tc.in}
		err := c.Validate()
		if tc.wantErr {
			require.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, c.RefreshEvery)
	}
}
