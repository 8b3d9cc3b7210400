package token_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/provider/wecom"
	"github.com/msgpulse/msgpulse/internal/provider/wecom/wecomtest"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/token"
)

type fixture struct {
	srv   *wecomtest.Server
	redis *testenv.Redis
}

func setup(t *testing.T) fixture {
	t.Helper()
	t.Parallel()
	return fixture{srv: wecomtest.New(t), redis: testenv.NewRedis(t)}
}

// source is one "process": its own client and Source on the shared Redis.
func (f fixture) source(t *testing.T, early time.Duration) *token.Source {
	t.Helper()
	c, err := wecom.New(wecom.Config{CorpID: wecomtest.CorpID, CorpSecret: wecomtest.CorpSecret, AgentID: wecomtest.AgentID, APIBase: f.srv.URL}, nopTokens{})
	require.NoError(t, err)
	s, err := token.New(f.redis.Client, token.Config{Prefix: f.redis.Prefix, Name: "wecom:test", Early: early}, c.FetchToken)
	require.NoError(t, err)
	return s
}

type nopTokens struct{}

func (nopTokens) Token(context.Context) (string, error)    { return "", nil }
func (nopTokens) Invalidate(context.Context, string) error { return nil }

func TestManyProcessesFetchTheTokenOnce(t *testing.T) {
	f := setup(t)
	sources := []*token.Source{f.source(t, 0), f.source(t, 0)}
	ctx := testenv.Context(t, 10*time.Second)
	var wg sync.WaitGroup
	got := make(chan string, 40)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok, err := sources[i%2].Token(ctx)
			require.NoError(t, err)
			got <- tok
		}()
	}
	wg.Wait()
	close(got)
	require.Equal(t, 1, f.srv.TokenFetches())
	issued := f.srv.Tokens()
	require.Len(t, issued, 1)
	for tok := range got {
		require.Equal(t, issued[0], tok, "every caller has the one token fetched")
	}
}

func TestInvalidateRefreshesOnceForAllWhoSawTheBadToken(t *testing.T) {
	f := setup(t)
	a, b := f.source(t, 0), f.source(t, 0)
	ctx := testenv.Context(t, 10*time.Second)
	bad, err := a.Token(ctx)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := []*token.Source{a, b}[i%2]
			require.NoError(t, s.Invalidate(ctx, bad))
			tok, err := s.Token(ctx)
			require.NoError(t, err)
			// An invalidation that came after the refresh must not drop the
			// new token.
			require.NoError(t, s.Invalidate(ctx, bad))
			require.NotEqual(t, bad, tok)
		}()
	}
	wg.Wait()
	require.Equal(t, 2, f.srv.TokenFetches())
}

func TestTokenIsRefreshedBeforeTheVendorsExpiry(t *testing.T) {
	f := setup(t)
	f.srv.TokenTTL = 4 * time.Second
	s := f.source(t, 2*time.Second) // kept 2 s of its 4
	ctx := testenv.Context(t, 10*time.Second)
	first, err := s.Token(ctx)
	require.NoError(t, err)
	ttl, err := f.redis.Client.PTTL(ctx, f.redis.Prefix+"token:wecom:test").Result()
	require.NoError(t, err)
	require.LessOrEqual(t, ttl, 2*time.Second)
	require.Greater(t, ttl, time.Second)
	testenv.WaitFor(t, 5*time.Second, "a new token", func() bool {
		tok, err := s.Token(ctx)
		return err == nil && tok != first
	})
	require.Equal(t, 2, f.srv.TokenFetches())
}

func TestAFailedFetchIsNotCached(t *testing.T) {
	f := setup(t)
	c, err := wecom.New(wecom.Config{CorpID: wecomtest.CorpID, CorpSecret: "wrong", AgentID: wecomtest.AgentID, APIBase: f.srv.URL}, nopTokens{})
	require.NoError(t, err)
	s, err := token.New(f.redis.Client, token.Config{Prefix: f.redis.Prefix, Name: "wecom:test"}, c.FetchToken)
	require.NoError(t, err)
	_, err = s.Token(testenv.Context(t, 5*time.Second))
	require.ErrorContains(t, err, "40001")
	// The lock is gone: the next caller fetches at once.
	_, err = s.Token(testenv.Context(t, 5*time.Second))
	require.ErrorContains(t, err, "40001")
}
