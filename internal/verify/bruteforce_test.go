package verify

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// wrongCodes returns n distinct codes of length digits, none equal to code,
// in the order an attacker would try them.
func wrongCodes(code string, digits, n int) []string {
	out := make([]string, 0, n)
	for i := 0; len(out) < n; i++ {
		c := fmt.Sprintf("%0*d", digits, i)
		if c != code {
			out = append(out, c)
		}
	}
	return out
}

// An attacker who does not hold the code gets exactly MaxAttempts guesses:
// MaxAttempts distinct wrong codes burn it, and after that even the right
// code fails, further guesses are not counted against anything, and every
// check says the code is locked until it would have expired.
func TestBruteForceBurnsTheCodeAtTheLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ digits, attempts int }{{6, 5}, {6, 1}, {4, 3}, {8, 10}} {
		t.Run(fmt.Sprintf("%d digits, %d attempts", tc.digits, tc.attempts), func(t *testing.T) {
			s, r := setup(t, Config{CodeLength: tc.digits, MaxAttempts: tc.attempts})
			ctx := context.Background()
			const ch, rcpt, purpose = "sms", "+8613900001234", "login"
			iss, err := s.Issue(ctx, "shop", ch, rcpt, purpose, "t")
			require.NoError(t, err)
			for i, guess := range wrongCodes(iss.Code, tc.digits, tc.attempts) {
				res, err := s.Check(ctx, "shop", ch, rcpt, purpose, guess, nil)
				require.NoError(t, err)
				left := tc.attempts - i - 1
				require.Equal(t, Result{AttemptsLeft: left, Burned: left == 0}, res, "guess %d", i+1)
			}
			left, err := r.Client.HExists(ctx, s.key("shop", ch, rcpt, purpose), "digest").Result()
			require.NoError(t, err)
			require.False(t, left, "the burned code's digest is deleted")
			ttl, err := r.Client.PTTL(ctx, s.key("shop", ch, rcpt, purpose)).Result()
			require.NoError(t, err)
			require.Greater(t, ttl, time.Duration(0), "the lock lasts as long as the code would have")
			res, err := s.Check(ctx, "shop", ch, rcpt, purpose, iss.Code, nil)
			require.NoError(t, err)
			require.Equal(t, Result{Locked: true}, res, "the right code after the limit fails too")
			for _, guess := range wrongCodes(iss.Code, tc.digits, 3) {
				res, err := s.Check(ctx, "shop", ch, rcpt, purpose, guess, nil)
				require.NoError(t, err)
				require.Equal(t, Result{Locked: true}, res, "nothing left to guess at, and the caller is told so")
			}
		})
	}
}

// A sequential sweep finds the code only if it comes among the first
// MaxAttempts guesses: the code sits at every position from 0 to 3×the
// limit in turn, and the sweep succeeds exactly when the position is below
// the limit.
func TestSweepSucceedsOnlyWithinTheLimit(t *testing.T) {
	const attempts = 5
	s, _ := setup(t, Config{CodeLength: 6, MaxAttempts: attempts})
	ctx := context.Background()
	for pos := range 3 * attempts {
		rcpt := "sweep" + strconv.Itoa(pos) + "@example.com"
		iss, err := s.Issue(ctx, "shop", "email", rcpt, "login", "t")
		require.NoError(t, err)
		guesses := wrongCodes(iss.Code, 6, 3*attempts)
		guesses = append(guesses[:pos:pos], append([]string{iss.Code}, guesses[pos:]...)...)
		found := -1
		for i, g := range guesses {
			res, err := s.Check(ctx, "shop", "email", rcpt, "login", g, nil)
			require.NoError(t, err)
			if res.Valid {
				require.Equal(t, -1, found, "a second success")
				found = i
			}
		}
		if pos < attempts {
			require.Equal(t, pos, found, "the code at guess %d is within the limit", pos+1)
		} else {
			require.Equal(t, -1, found, "the code at guess %d is beyond the limit of %d", pos+1, attempts)
		}
	}
}

// Many concurrent checks of one code, wrong and right mixed, cannot buy
// extra attempts. A check is evaluated when it is counted as a failure (its
// answer has attempts left, or burns the code) or succeeds; a check that
// finds the code gone is not. In every round: at most one success; the
// counted failures are distinct (no two checks read the same count, which
// a read-then-write race would show); and successes plus counted failures
// never exceed the limit, so a success can only come within the first
// MaxAttempts evaluations.
func TestConcurrentGuessesNeverExceedTheLimit(t *testing.T) {
	const attempts, guessers, rights, rounds = 5, 48, 4, 25
	s, r := setup(t, Config{CodeLength: 6, MaxAttempts: attempts})
	ctx := context.Background()
	won := 0
	for round := range rounds {
		rcpt := "+86139" + fmt.Sprintf("%08d", round)
		iss, err := s.Issue(ctx, "shop", "sms", rcpt, "login", "t")
		require.NoError(t, err)
		guesses := wrongCodes(iss.Code, 6, guessers-rights)
		for range rights {
			guesses = append(guesses, iss.Code)
		}
		rand.Shuffle(len(guesses), func(i, j int) { guesses[i], guesses[j] = guesses[j], guesses[i] })

		results := make([]Result, len(guesses))
		errs := make([]error, len(guesses))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, g := range guesses {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i], errs[i] = s.Check(ctx, "shop", "sms", rcpt, "login", g, nil)
			}()
		}
		close(start)
		wg.Wait()

		successes, counted := 0, map[int]int{}
		for i, res := range results {
			require.NoError(t, errs[i])
			switch {
			case res.Valid:
				require.Equal(t, iss.Code, guesses[i], "a wrong code succeeded")
				successes++
			case res.Burned || res.AttemptsLeft > 0:
				counted[res.AttemptsLeft]++
			}
		}
		require.LessOrEqual(t, successes, 1, "round %d", round)
		for left, n := range counted {
			require.Equal(t, 1, n, "round %d: %d checks were all told %d attempts are left", round, n, left)
		}
		require.LessOrEqual(t, len(counted)+successes, attempts, "round %d: %d failures counted and %d successes", round, len(counted), successes)
		if successes == 1 {
			require.Less(t, len(counted), attempts, "round %d: success after the code was burned", round)
			won++
		}
		n, err := r.Client.HExists(ctx, s.key("shop", "sms", rcpt, "login"), "digest").Result()
		require.NoError(t, err)
		require.False(t, n, "round %d: the code is consumed or burned", round)
		res, err := s.Check(ctx, "shop", "sms", rcpt, "login", iss.Code, nil)
		require.NoError(t, err)
		require.False(t, res.Valid, "round %d: the code works again afterwards", round)
	}
	t.Logf("%d of %d rounds: one of the %d right guesses landed within the first %d evaluations", won, rounds, rights, attempts)
}
