package ratelimit_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/rdb"
)

// suppressed writes the suppression entry of who, as internal/suppression
// does, and returns its check.
func suppressed(t *testing.T, e env, who, reason string, except ...string) *ratelimit.Suppress {
	t.Helper()
	key := e.r.Prefix + "suppression:{" + who + "}"
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	require.NoError(t, e.r.Client.HSet(e.ctx, key, "reason", reason, "code", "5.1.1", "task", "t-1", "at", strconv.FormatInt(at.UnixMilli(), 10)).Err())
	return &ratelimit.Suppress{Key: key, Except: except}
}

func suppressedErr(t *testing.T, err error) *ratelimit.SuppressedError {
	t.Helper()
	require.ErrorIs(t, err, ratelimit.ErrLimited)
	var se *ratelimit.SuppressedError
	require.True(t, errors.As(err, &se), "want a *SuppressedError, got %v", err)
	return se
}

// A suppressed recipient is refused with its entry before anything is
// recorded: no count, no cooldown, no Then write, no idempotency entry;
// an excepted reason (an unsubscribe, for a code) lets the request
// through as if there were no entry, and a recipient without an entry
// is admitted.
func TestSuppressRefusesBeforeAnythingIsWritten(t *testing.T) {
	tests := []struct {
		name   string
		reason string
		except []string
		refuse bool
	}{
		{"hard bounce refuses a code", "hard_bounce", []string{"unsubscribe"}, true},
		{"unsubscribe spares a code", "unsubscribe", []string{"unsubscribe"}, false},
		{"unsubscribe refuses a notice", "unsubscribe", nil, true},
		{"no entry", "", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			who := "acme:email:a@example.com"
			sp := &ratelimit.Suppress{Key: e.r.Prefix + "suppression:{" + who + "}", Except: tc.except}
			if tc.reason != "" {
				sp = suppressed(t, e, who, tc.reason, tc.except...)
			}
			written := e.r.Prefix + "written:{" + who + "}"
			req := ratelimit.Request{
				Rules:    []ratelimit.Rule{{Name: "per recipient", Key: "r", Tag: who, Windows: []ratelimit.Window{win(time.Hour, 5)}}, rule("global", "g", win(time.Second, 100000))},
				Cooldown: &ratelimit.Cooldown{Name: "cooldown", Key: "cd", Tag: who, For: time.Minute},
				Then:     []rdb.Command{{"SET", written, "1"}},
				Once:     &ratelimit.Once{Key: "acme:k1", Digest: "d", IDs: "t-2", Lease: time.Minute, TTL: time.Hour},
				Suppress: sp,
			}
			res, err := e.lim.Take(e.ctx, req)
			if !tc.refuse {
				require.NoError(t, err)
				require.NotEmpty(t, res.Keys)
				return
			}
			se := suppressedErr(t, err)
			require.Equal(t, tc.reason, se.Reason)
			require.Equal(t, "5.1.1", se.Code)
			require.Equal(t, "t-1", se.TaskID)
			require.Equal(t, time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC), se.At)
			// Nothing of the request is left: only the entry itself.
			keys, err := rdb.Keys(e.ctx, e.r.Client, e.r.Prefix+"*") // every node of a cluster
			require.NoError(t, err)
			require.Equal(t, []string{sp.Key}, keys)
		})
	}
}

// TakeUpTo leaves suppressed units out and admits the others as if they
// had not been asked for: the limits count only them.
func TestTakeUpToLeavesSuppressedUnitsOut(t *testing.T) {
	e := setup(t)
	each := make([]*ratelimit.Suppress, 5)
	for i := range each {
		who := "acme:email:u" + strconv.Itoa(i) + "@example.com"
		each[i] = &ratelimit.Suppress{Key: e.r.Prefix + "suppression:{" + who + "}"}
	}
	each[1] = suppressed(t, e, "acme:email:u1@example.com", "complaint")
	each[3] = suppressed(t, e, "acme:email:u3@example.com", "unsubscribe")
	each[4] = nil // not checked
	req := ratelimit.Request{Rules: []ratelimit.Rule{rule("per tenant", "tenant", win(time.Minute, 2))}, SuppressEach: each}
	b, err := e.lim.TakeUpTo(e.ctx, req, make([][]rdb.Command, 5))
	require.NoError(t, err)
	require.Len(t, b.Suppressed, 2)
	require.Equal(t, "complaint", b.Suppressed[1].Reason)
	require.Equal(t, "unsubscribe", b.Suppressed[3].Reason)
	// Units 0, 2 and 4 remain; the limit of 2 admits the first two.
	require.Equal(t, 2, b.Admitted)
	require.Equal(t, "per tenant", limitErr(t, b.Refused).Rule)
	n, err := e.r.Client.ZCard(e.ctx, e.r.Prefix+"ratelimit:{tenant}:log:tenant").Result()
	require.NoError(t, err)
	require.EqualValues(t, 2, n)

	// Every unit suppressed: nothing admitted, nothing refused by a limit.
	all := []*ratelimit.Suppress{each[1], each[3]}
	b, err = e.lim.TakeUpTo(e.ctx, ratelimit.Request{Rules: req.Rules, SuppressEach: all}, make([][]rdb.Command, 2))
	require.NoError(t, err)
	require.Zero(t, b.Admitted)
	require.NoError(t, b.Refused)
	require.Len(t, b.Suppressed, 2)
}
