package verify

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/seal"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

func setup(t *testing.T, cfg Config) (*Store, *testenv.Redis) {
	t.Helper()
	t.Parallel()
	r := testenv.NewRedis(t)
	keys, err := seal.New(seal.DevSecret)
	require.NoError(t, err)
	cfg.Prefix = r.Prefix
	s, err := New(r.Client, keys, cfg)
	require.NoError(t, err)
	return s, r
}

func TestGenerate(t *testing.T) {
	s, _ := setup(t, Config{CodeLength: 8})
	seen := map[string]bool{}
	for range 200 {
		c, err := s.Generate()
		require.NoError(t, err)
		require.Len(t, c, 8)
		require.Equal(t, "", strings.Trim(c, "0123456789"))
		seen[c] = true
	}
	require.Greater(t, len(seen), 195, "codes must not repeat in practice")
}

func TestCorrectCodeWorksOnceAndIsNeverStoredInClear(t *testing.T) {
	s, r := setup(t, Config{})
	ctx := context.Background()
	iss, err := s.Issue(ctx, "shop", "email", "a@example.com", "login", "task-1")
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(10*time.Minute), iss.ExpiresAt, 5*time.Second)

	keys, err := rdb.Keys(ctx, r.Client, r.Prefix+"*")
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.NotContains(t, keys[0], iss.Code)
	fields, err := r.Client.HGetAll(ctx, keys[0]).Result()
	require.NoError(t, err)
	for k, v := range fields {
		require.NotContains(t, v, iss.Code, "field %s holds the code in clear", k)
	}
	ttl, err := r.Client.PTTL(ctx, keys[0]).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 9*time.Minute)

	res, err := s.Check(ctx, "shop", "email", "a@example.com", "login", iss.Code, nil)
	require.NoError(t, err)
	require.Equal(t, Result{Valid: true, AttemptsLeft: 5}, res)
	res, err = s.Check(ctx, "shop", "email", "a@example.com", "login", iss.Code, nil)
	require.NoError(t, err)
	require.False(t, res.Valid, "single use")
}

func TestWrongAttemptsBurnTheCode(t *testing.T) {
	s, _ := setup(t, Config{MaxAttempts: 3})
	ctx := context.Background()
	iss, err := s.Issue(ctx, "shop", "sms", "+8613900001234", "register", "t")
	require.NoError(t, err)
	wrong := "000000"
	if iss.Code == wrong {
		wrong = "111111"
	}
	for i, want := range []Result{{AttemptsLeft: 2}, {AttemptsLeft: 1}, {AttemptsLeft: 0, Burned: true}} {
		res, err := s.Check(ctx, "shop", "sms", "+8613900001234", "register", wrong, nil)
		require.NoError(t, err)
		require.Equal(t, want, res, "attempt %d", i+1)
	}
	res, err := s.Check(ctx, "shop", "sms", "+8613900001234", "register", iss.Code, nil)
	require.NoError(t, err)
	require.False(t, res.Valid, "a burned code stays invalid even when right")
}

func TestCodesAreScopedAndReplaced(t *testing.T) {
	s, _ := setup(t, Config{})
	ctx := context.Background()
	first, err := s.Issue(ctx, "shop", "email", "a@example.com", "login", "t1")
	require.NoError(t, err)
	second, err := s.Issue(ctx, "shop", "email", "a@example.com", "login", "t2")
	require.NoError(t, err)
	for _, tc := range []struct {
		name                                string
		tenant, channel, recipient, purpose string
		code                                string
	}{
		{"old code replaced", "shop", "email", "a@example.com", "login", first.Code},
		{"other purpose", "shop", "email", "a@example.com", "register", second.Code},
		{"other recipient", "shop", "email", "b@example.com", "login", second.Code},
		{"other channel", "shop", "sms", "a@example.com", "login", second.Code},
		{"other tenant", "blog", "email", "a@example.com", "login", second.Code},
	} {
		if tc.code == second.Code && tc.name == "old code replaced" {
			continue // 1 in 10^6: the two codes happen to be equal
		}
		res, err := s.Check(ctx, tc.tenant, tc.channel, tc.recipient, tc.purpose, tc.code, nil)
		require.NoError(t, err)
		require.False(t, res.Valid, tc.name)
	}
	res, err := s.Check(ctx, "shop", "email", "a@example.com", "login", second.Code, nil)
	require.NoError(t, err)
	require.True(t, res.Valid)
}

func TestRollbackRestoresThePreviousCode(t *testing.T) {
	s, r := setup(t, Config{})
	ctx := context.Background()
	// Nothing before: rollback leaves nothing behind.
	iss, err := s.Issue(ctx, "shop", "email", "a@example.com", "login", "t1")
	require.NoError(t, err)
	require.NoError(t, s.Rollback(ctx, iss))
	n, err := r.Client.Exists(ctx, s.key("shop", "email", "a@example.com", "login")).Result()
	require.NoError(t, err)
	require.Zero(t, n)

	// A previous code: rollback puts it back, with its own expiry.
	prev, err := s.Issue(ctx, "shop", "email", "a@example.com", "login", "t2")
	require.NoError(t, err)
	iss, err = s.Issue(ctx, "shop", "email", "a@example.com", "login", "t3")
	require.NoError(t, err)
	require.NoError(t, s.Rollback(ctx, iss))
	res, err := s.Check(ctx, "shop", "email", "a@example.com", "login", prev.Code, nil)
	require.NoError(t, err)
	require.True(t, res.Valid, "the code the user already holds works again")

	// A newer code replaced ours: rollback must not touch it.
	ours, err := s.Issue(ctx, "shop", "email", "a@example.com", "login", "t4")
	require.NoError(t, err)
	newer, err := s.Issue(ctx, "shop", "email", "a@example.com", "login", "t5")
	require.NoError(t, err)
	require.NoError(t, s.Rollback(ctx, ours))
	res, err = s.Check(ctx, "shop", "email", "a@example.com", "login", newer.Code, nil)
	require.NoError(t, err)
	require.True(t, res.Valid)
}

func TestConcurrentCorrectChecksConsumeOnce(t *testing.T) {
	s, _ := setup(t, Config{})
	ctx := context.Background()
	iss, err := s.Issue(ctx, "shop", "email", "a@example.com", "login", "t")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	valid := 0
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := s.Check(ctx, "shop", "email", "a@example.com", "login", iss.Code, nil)
			require.NoError(t, err)
			if res.Valid {
				mu.Lock()
				valid++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 1, valid)
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{CodeLength: 3}, {CodeLength: 11}, {TTL: time.Millisecond}, {MaxAttempts: -1}} {
		require.Error(t, c.Validate(), "%+v", c)
	}
}

// Every digit is equally likely in every position, leading zeros included:
// a biased generator would shrink the space a brute force has to search.
// With 100k draws a digit's count has a standard deviation near 95, so
// the ±600 bound (over 6σ) fails only on a real bias.
func TestGenerateIsUniform(t *testing.T) {
	s, _ := setup(t, Config{CodeLength: 4})
	var counts [4][10]int
	for range 100_000 {
		c, err := s.Generate()
		require.NoError(t, err)
		for i := range 4 {
			counts[i][c[i]-'0']++
		}
	}
	for pos, row := range counts {
		for d, n := range row {
			require.InDelta(t, 10_000, n, 600, "digit %d at position %d", d, pos)
		}
	}
}

// Another tenant's wrong guesses and new code for the same recipient and
// purpose leave a tenant's code alone: its attempts, and its validity.
func TestAnotherTenantCannotBurnOrReplaceACode(t *testing.T) {
	s, _ := setup(t, Config{MaxAttempts: 5})
	ctx := context.Background()
	ours, err := s.Issue(ctx, "shop", "sms", "+8613900001234", "login", "t1")
	require.NoError(t, err)
	wrong := "000000"
	if ours.Code == wrong {
		wrong = "111111"
	}
	for range 5 {
		res, err := s.Check(ctx, "blog", "sms", "+8613900001234", "login", wrong, nil)
		require.NoError(t, err)
		require.Equal(t, Result{}, res, "blog has no code: nothing to count, nothing learnt")
	}
	theirs, err := s.Issue(ctx, "blog", "sms", "+8613900001234", "login", "t2")
	require.NoError(t, err)
	if theirs.Code != ours.Code { // 1 in 10^6 they are equal
		res, err := s.Check(ctx, "blog", "sms", "+8613900001234", "login", ours.Code, nil)
		require.NoError(t, err)
		require.False(t, res.Valid, "shop's code is not valid for blog")
	}
	res, err := s.Check(ctx, "shop", "sms", "+8613900001234", "login", ours.Code, nil)
	require.NoError(t, err)
	require.Equal(t, Result{Valid: true, AttemptsLeft: 5}, res, "untouched by blog")
}

// For is a function of the task id alone: a retry under an Idempotency-Key
// seals the code its first attempt sealed; another task gets another code.
func TestForIsTheSameCodeForTheSameTask(t *testing.T) {
	keys, err := seal.New("for-test-secret-0123456789abcdefghabcdef")
	require.NoError(t, err)
	s, err := New(nil, keys, Config{CodeLength: 6})
	require.NoError(t, err)
	seen := map[string]bool{}
	for i := range 200 {
		id := fmt.Sprintf("task-%d", i)
		c := s.For(id)
		require.Len(t, c, 6)
		require.Regexp(t, `^[0-9]{6}$`, c)
		require.Equal(t, c, s.For(id))
		seen[c] = true
	}
	require.Greater(t, len(seen), 190, "codes spread over their space")
	other, err := seal.New("another-secret-0123456789abcdefghabcdef0")
	require.NoError(t, err)
	o, err := New(nil, other, Config{CodeLength: 6})
	require.NoError(t, err)
	require.NotEqual(t, s.For("task-1")+s.For("task-2"), o.For("task-1")+o.For("task-2"), "the secret keys it")
}
