package console_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/console"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/seal"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

// tenantCallbackKey stands for a secret a tenant holds: the key its
// callbacks are signed with.
const tenantCallbackKey = "shopA-callback-key-0123456789abcdefghabcdef"

// oldSignedCookie is a session cookie as the console made them before
// sessions moved to Redis: the key name and expiry, signed under a key
// derived from a secret (CODE_SECRET, which also signed callbacks).
func oldSignedCookie(secret, name string, until time.Time) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("msgpulse console session v1"))
	key := m.Sum(nil)
	n := base64.RawURLEncoding.EncodeToString([]byte(name))
	exp := strconv.FormatInt(until.Unix(), 10)
	m = hmac.New(sha256.New, key)
	m.Write([]byte(strings.Join([]string{"session", n, exp}, "\x00")))
	return n + "." + exp + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// withCookie asks base for a page and for an action with this session
// cookie value, and reports whether both were let in.
func withCookie(t *testing.T, base, dlq, value string) bool {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequest(http.MethodGet, base+"/console/queues", nil)
	require.NoError(t, err)
	req.AddCookie(&http.Cookie{Name: "msgpulse_console", Value: value})
	resp, err := c.Do(req)
	require.NoError(t, err)
	page := readBody(t, resp)
	pageIn := resp.StatusCode == http.StatusOK
	if !pageIn {
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, page)
		require.Equal(t, "/console/login", resp.Header.Get("Location"))
	}
	// An action: without a valid session, 401 before the CSRF token is
	// even looked at; with one, 403 for the missing token.
	req, err = http.NewRequest(http.MethodPost, base+"/console/dlq/"+dlq+"/replay", strings.NewReader(url.Values{"reason": {"rejected"}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: "msgpulse_console", Value: value})
	resp, err = c.Do(req)
	require.NoError(t, err)
	_ = readBody(t, resp)
	actionIn := resp.StatusCode == http.StatusForbidden
	if !actionIn {
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}
	require.Equal(t, pageIn, actionIn, "the page and the action agree")
	return pageIn
}

// sessionOf is the session cookie's value in a logged-in client's jar.
func (h *harness) sessionOf(t *testing.T, c *http.Client) string {
	t.Helper()
	u, err := url.Parse(h.http.URL + "/console")
	require.NoError(t, err)
	for _, ck := range c.Jar.Cookies(u) {
		if ck.Name == "msgpulse_console" {
			return ck.Value
		}
	}
	t.Fatal("no session cookie")
	return ""
}

// No secret anyone holds makes a session: a cookie signed the old way with
// CODE_SECRET or with a tenant's callback key, or shaped like a session id
// but made from one, is refused. A real session, read the same way, is let
// in (so the check can fail).
func TestForgedSessionCookiesAreRefused(t *testing.T) {
	h := setup(t)
	dlq := h.mail.DeadLetterQueue
	real := h.sessionOf(t, h.client(t, true))
	require.True(t, withCookie(t, h.http.URL, dlq, real), "a real session is let in")

	until := time.Now().Add(time.Hour)
	idShaped := func(secret string) string {
		m := hmac.New(sha256.New, []byte(secret))
		m.Write([]byte(testName))
		return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	}
	for name, value := range map[string]string{
		"signed with CODE_SECRET the old way":          oldSignedCookie(seal.DevSecret, testName, until),
		"signed with a tenant's callback key, old way": oldSignedCookie(tenantCallbackKey, testName, until),
		"an unnamed admin entry's name, old way":       oldSignedCookie(tenantCallbackKey, "key-1", until),
		"shaped like an id, from CODE_SECRET":          idShaped(seal.DevSecret),
		"shaped like an id, from a callback key":       idShaped(tenantCallbackKey),
		"the real id with a character changed":         real[:len(real)-1] + map[bool]string{true: "B", false: "A"}[strings.HasSuffix(real, "A")],
		"empty":                                        "",
	} {
		t.Run(name, func(t *testing.T) {
			require.False(t, withCookie(t, h.http.URL, dlq, value))
		})
	}
}

// Logging out ends the session on the server: a copy of the cookie is
// refused afterwards, and no session record is left in Redis.
func TestLogoutEndsTheSession(t *testing.T) {
	h := setup(t)
	c := h.client(t, true)
	value := h.sessionOf(t, c)
	require.True(t, withCookie(t, h.http.URL, h.mail.DeadLetterQueue, value), "the copy works while logged in")

	resp, err := c.PostForm(h.http.URL+"/console/logout", url.Values{"csrf": {h.csrfOf(t, c)}})
	require.NoError(t, err)
	_ = readBody(t, resp)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)

	require.False(t, withCookie(t, h.http.URL, h.mail.DeadLetterQueue, value), "the old cookie is refused after logout")
	left, err := rdb.Keys(t.Context(), h.stack.Redis.Client, h.stack.Redis.Prefix+"console:session:*")
	require.NoError(t, err)
	require.Empty(t, left, "the session record is gone")
}

// A session is bound to its key: an API replica (or the API after a
// restart) whose API_KEYS no longer hold the key, hold another value
// under its name, or no longer give it admin, refuses the session, and
// that ends it for every replica, the old ones included. A replica with
// the same keys lets it in: sessions are shared through Redis.
func TestSessionEndsWithItsKey(t *testing.T) {
	h := setup(t)
	backend := apikey.New("backend", sendKey, apikey.Scopes(apikey.Send))
	for _, tc := range []struct {
		name string
		keys []apikey.Key
	}{
		{"the key is removed", []apikey.Key{backend}},
		{"the key's value changes", []apikey.Key{apikey.New(testName, "rotated-"+testKey, apikey.Scopes(apikey.Admin)), backend}},
		{"the key loses admin", []apikey.Key{apikey.New(testName, testKey, apikey.Scopes(apikey.Send|apikey.Read)), backend}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			value := h.sessionOf(t, h.client(t, true))
			_, same := h.serve(t, keys, nil)
			require.True(t, withCookie(t, same.URL, h.mail.DeadLetterQueue, value), "another replica with the same API_KEYS lets the session in")

			_, restarted := h.serve(t, tc.keys, nil)
			require.False(t, withCookie(t, restarted.URL, h.mail.DeadLetterQueue, value), "the API with the new API_KEYS refuses it")
			require.False(t, withCookie(t, h.http.URL, h.mail.DeadLetterQueue, value), "and the session is over for the replica still on the old API_KEYS too")
		})
	}
	t.Run("the digest form of the same key keeps the session", func(t *testing.T) {
		value := h.sessionOf(t, h.client(t, true))
		k, err := apikey.Parse(testName+":sha256="+apikey.Digest(testKey)+":admin", 1)
		require.NoError(t, err)
		_, restarted := h.serve(t, []apikey.Key{k, backend}, nil)
		require.True(t, withCookie(t, restarted.URL, h.mail.DeadLetterQueue, value))
	})
}

// Only an admin key logs in: send, send+read, read, no scope at all, and
// (once scope-less API_KEYS entries stop meaning admin) a plain
// `name:key` entry are refused, and get no session.
func TestLoginNeedsAdmin(t *testing.T) {
	h := setup(t)
	plain, err := apikey.Parse("shopA:k1-0123456789abcdefgh", 1)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		key  apikey.Key
		kv   string
	}{
		{"send", apikey.New("shopA/send", "send-0123456789abcdefgh", apikey.Scopes(apikey.Send)), "send-0123456789abcdefgh"},
		{"send+read", apikey.New("shopA/sendread", "sendread-0123456789abcdefgh", apikey.Scopes(apikey.Send|apikey.Read)), "sendread-0123456789abcdefgh"},
		{"read", apikey.New("shopA/read", "read-0123456789abcdefgh", apikey.Scopes(apikey.Read)), "read-0123456789abcdefgh"},
		{"no scope", apikey.New("shopA/none", "none-0123456789abcdefgh", 0), "none-0123456789abcdefgh"},
		{"an API_KEYS entry without scopes", plain, "k1-0123456789abcdefgh"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.key.Scopes.Has(apikey.Admin) {
				t.Skipf("apikey.Parse still gives an entry without scopes %s (issue 21 item 3, the secrets branch)", tc.key.Scopes)
			}
			_, srv := h.serve(t, append([]apikey.Key{tc.key}, keys...), nil)
			c := h.client(t, false)
			resp := loginAt(t, srv.URL, c, tc.key.Name, tc.kv)
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
			for _, ck := range resp.Cookies() {
				require.NotEqual(t, "msgpulse_console", ck.Name, "no session")
			}
		})
	}
	t.Run("an admin key logs in (so the cases above can fail)", func(t *testing.T) {
		resp := h.login(t, h.client(t, false), testName, testKey)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	})
	t.Run("an admin key under another name does not", func(t *testing.T) {
		resp := h.login(t, h.client(t, false), "backend", testKey)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	})
}

// A failed login is counted before its key is checked, per address and
// per key name: ten wrong logins sent at once with the limit at five
// have exactly five keys checked; the other five get 429 unchecked.
func TestParallelWrongLoginsAreCountedFirst(t *testing.T) {
	h := setup(t)
	con, _ := h.serve(t, keys, func(c *console.Config) { c.LoginFailures = 5 })
	attempt := func(addr, name, key string) int {
		n := testenv.ID()
		req := httptest.NewRequest(http.MethodPost, "/console/login", strings.NewReader(url.Values{"nonce": {n}, "name": {name}, "key": {key}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(&http.Cookie{Name: "msgpulse_console_login", Value: n})
		req.RemoteAddr = addr
		rec := httptest.NewRecorder()
		con.ServeHTTP(rec, req)
		return rec.Code
	}
	for _, tc := range []struct {
		name      string
		addr, who func(i int) string
	}{
		{"one address, ten key names", func(int) string { return "192.0.2.1:40000" }, func(i int) string { return "guess-" + strconv.Itoa(i) }},
		{"ten addresses, one key name", func(i int) string { return "198.51.100." + strconv.Itoa(10+i) + ":40000" }, func(int) string { return testName }},
		// One IPv6 subscriber holds a whole /64: its addresses count as
		// one, as the API's wrong keys do (issue 43).
		{"one /64, ten addresses, ten key names", func(i int) string { return "[2001:db8:1:2:" + strconv.Itoa(100+i) + "::1]:40000" },
			func(i int) string { return "v6-guess-" + strconv.Itoa(i) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.checks.Store(0)
			codes := make([]int, 10)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range codes {
				wg.Go(func() {
					<-start
					codes[i] = attempt(tc.addr(i), tc.who(i), "wrong-"+testenv.ID())
				})
			}
			close(start)
			wg.Wait()
			count := map[int]int{}
			for _, c := range codes {
				count[c]++
			}
			t.Logf("10 parallel wrong logins, limit 5: %d keys checked, status codes %v", h.checks.Load(), count)
			require.Equal(t, int64(5), h.checks.Load(), "at most the limit reach the key check")
			require.Equal(t, map[int]int{http.StatusUnauthorized: 5, http.StatusTooManyRequests: 5}, count)

			// The right key (for its own name in the second case) is
			// refused unchecked too, from the blocked address or for the
			// blocked name.
			h.checks.Store(0)
			require.Equal(t, http.StatusTooManyRequests, attempt(tc.addr(0), tc.who(0), testKey))
			require.Equal(t, int64(0), h.checks.Load())
		})
	}
}
