package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// queue is a channel's main queue, by the topology model.
func (h *harness) queue(channel string) string {
	h.t.Helper()
	ct, err := h.model.Channel(channel)
	require.NoError(h.t, err)
	return ct.Queue
}

// Over HTTP: only the exact key opens /api; a wrong, short, long, empty or
// other-case key is a 401 that says nothing about the keys.
func TestWrongAPIKeysAreRefused(t *testing.T) {
	h := setup(t, options{})
	for _, tc := range []struct {
		name, key string
		want      int
	}{
		{"the key", testKey, http.StatusOK},
		{"empty", "", http.StatusUnauthorized},
		{"wrong, same length", strings.Repeat("x", len(testKey)), http.StatusUnauthorized},
		{"one character short", testKey[:len(testKey)-1], http.StatusUnauthorized},
		{"one character long", testKey + "0", http.StatusUnauthorized},
		{"much longer", strings.Repeat(testKey, 100), http.StatusUnauthorized},
		{"last character changed", testKey[:len(testKey)-1] + "X", http.StatusUnauthorized},
		{"upper case", strings.ToUpper(testKey), http.StatusUnauthorized},
		{"the caller's name", "tests", http.StatusUnauthorized},
		{"name:key", "tests:" + testKey, http.StatusUnauthorized},
	} {
		r := h.do("GET", "/api/rate-limits", nil, "X-API-Key", tc.key)
		require.Equal(t, tc.want, r.Status, tc.name)
		if tc.want == http.StatusUnauthorized {
			require.NotContains(t, r.Msg, testKey, tc.name)
			require.NotContains(t, string(r.RawData), "tests", "%s: a refusal names no caller", tc.name)
		}
	}
}

// tokenOf matches s as a token of its own (not inside a longer run of
// letters and digits), which is how a stored code would appear (a value, a
// field, a key segment) and how a timestamp or a hex digest would not.
func tokenOf(s string) *regexp.Regexp {
	return regexp.MustCompile(`(^|[^0-9A-Za-z])` + regexp.QuoteMeta(s) + `([^0-9A-Za-z]|$)`)
}

// scanRedis returns "key: where" for every place under the test's prefix
// where re matches: key names, and values of every Redis type.
func (h *harness) scanRedis(re *regexp.Regexp) []string {
	h.t.Helper()
	ctx := context.Background()
	c := h.redis.Client
	var hits []string
	check := func(key, where, v string) {
		if re.MatchString(v) {
			hits = append(hits, fmt.Sprintf("%s: %s = %q", key, where, v))
		}
	}
	keys, err := rdb.Keys(ctx, c, h.redis.Prefix+"*") // every node of a cluster
	require.NoError(h.t, err)
	n := 0
	for _, k := range keys {
		n++
		check(k, "key name", k)
		typ, err := c.Type(ctx, k).Result()
		require.NoError(h.t, err)
		switch typ {
		case "none": // expired since the scan listed it (rate-limit logs are short-lived)
		case "string":
			v, err := c.Get(ctx, k).Result()
			if errors.Is(err, redis.Nil) {
				continue
			}
			require.NoError(h.t, err)
			check(k, "value", v)
		case "hash":
			v, err := c.HGetAll(ctx, k).Result()
			require.NoError(h.t, err)
			for f, x := range v {
				check(k, "field name", f)
				check(k, "field "+f, x)
			}
		case "list":
			v, err := c.LRange(ctx, k, 0, -1).Result()
			require.NoError(h.t, err)
			check(k, "list", strings.Join(v, "\n"))
		case "set":
			v, err := c.SMembers(ctx, k).Result()
			require.NoError(h.t, err)
			check(k, "set", strings.Join(v, "\n"))
		case "zset":
			v, err := c.ZRange(ctx, k, 0, -1).Result()
			require.NoError(h.t, err)
			check(k, "zset", strings.Join(v, "\n"))
		case "stream":
			v, err := c.XRange(ctx, k, "-", "+").Result()
			require.NoError(h.t, err)
			for _, m := range v {
				check(k, "stream "+m.ID, fmt.Sprint(m.Values))
			}
		default:
			h.t.Fatalf("key %s of type %s: teach the scan to read it", k, typ)
		}
	}
	require.Positive(h.t, n, "the scan found no keys at all")
	return hits
}

// Codes issued through the API, by email and by SMS, guessed wrong, are nowhere in Redis in clear: not in a key name, not in any
// value of any type. The recipients are there (keys are per recipient),
// which shows the scan reads what is stored.
func TestCodesAreNotInRedisInClear(t *testing.T) {
	h := setup(t, options{})
	var codes, tasks []string
	issue := func(channel, recipient, purpose string) {
		body := map[string]any{"channel": channel, "recipient": recipient, "purpose": purpose}
		r := h.do("POST", "/api/verification-codes", body)
		require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
		var vc VerificationCode
		r.data(t, &vc)
		tasks = append(tasks, vc.TaskID)
		codes = append(codes, h.code(h.get(h.queue(topologyChannel(channel)))))
	}
	issue("email", "scan@example.com", "login")
	issue("sms", "+8613900005678", "login")
	issue("email", "scan@example.com", "register")
	wrong := "000000"
	for _, c := range codes {
		if c == wrong {
			wrong = "999999"
		}
	}
	for range 2 {
		r := h.do("POST", "/api/verification-codes/verify", map[string]any{"channel": "sms", "recipient": "+8613900005678", "purpose": "login", "code": wrong})
		require.Equal(t, http.StatusOK, r.Status)
	}

	// Controls: the scan finds what is stored, in key names and in values.
	require.NotEmpty(t, h.scanRedis(regexp.MustCompile(regexp.QuoteMeta("scan@example.com"))), "the scan sees stored recipients")
	for _, id := range tasks {
		require.NotEmpty(t, h.scanRedis(tokenOf(id)), "the scan sees task %s", id)
	}
	for _, code := range codes {
		require.Empty(t, h.scanRedis(tokenOf(code)), "code %s stored in clear", code)
	}
	require.Empty(t, h.scanRedis(tokenOf(wrong)), "a wrong guess stored in clear")
}

// Concurrent verify calls through the HTTP API: at most one succeeds, and
// the answers count down without repeating, never past the limit.
func TestConcurrentVerifyOverHTTP(t *testing.T) {
	h := setup(t, options{})
	r := h.do("POST", "/api/verification-codes", codeRequest("race@example.com", "login"))
	require.Equal(t, http.StatusAccepted, r.Status)
	code := h.code(h.get(h.queue(topology.Mail)))
	const n = 30
	var wg sync.WaitGroup
	var mu sync.Mutex
	valid := 0
	lefts := map[int]int{}
	start := make(chan struct{})
	for i := range n {
		guess := fmt.Sprintf("%06d", i)
		if guess == code {
			guess = "999999"
		}
		if i%10 == 0 {
			guess = code
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r := h.do("POST", "/api/verification-codes/verify", map[string]any{"channel": "email", "recipient": "race@example.com", "purpose": "login", "code": guess})
			var v VerifyResult
			r.data(t, &v)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case v.Valid:
				valid++
			case r.Status == http.StatusTooManyRequests && strings.Contains(r.Msg, "locked"):
				// found the code already burned: not counted
			case r.Status == http.StatusTooManyRequests || v.AttemptsLeft > 0:
				lefts[v.AttemptsLeft]++
			}
		}()
	}
	close(start)
	wg.Wait()
	require.LessOrEqual(t, valid, 1)
	for left, k := range lefts {
		require.Equal(t, 1, k, "%d answers said %d attempts left", k, left)
	}
	require.LessOrEqual(t, len(lefts)+valid, 5, "failures counted %v, successes %d", lefts, valid)
}
