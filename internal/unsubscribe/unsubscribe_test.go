package unsubscribe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/receipt/unsub"
	"github.com/msgpulse/msgpulse/internal/suppression"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/unsubscribe"
)

// redisList is a tiny suppression list in the test's Redis prefix, a
// stand-in for *suppression.Store: one hash field per tenant, channel and
// recipient.
type redisList struct {
	c   redis.UniversalClient
	key string
}

func (l *redisList) Add(ctx context.Context, e suppression.Entry) error {
	if err := e.Validate(); err != nil {
		return err
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return l.c.HSet(ctx, l.key, e.Tenant+"|"+e.Channel+"|"+e.Recipient, b).Err()
}

func (l *redisList) entries(t *testing.T) []suppression.Entry {
	t.Helper()
	m, err := l.c.HGetAll(testenv.Context(t, 5*time.Second), l.key).Result()
	require.NoError(t, err)
	var out []suppression.Entry
	for _, v := range m {
		var e suppression.Entry
		require.NoError(t, json.Unmarshal([]byte(v), &e))
		out = append(out, e)
	}
	return out
}

// switchable is a list whose Redis can be taken away: a closed client,
// whose every call fails as a Redis that is down does.
type switchable struct {
	*redisList
	down redis.UniversalClient
	off  atomic.Bool
}

func (s *switchable) Add(ctx context.Context, e suppression.Entry) error {
	if s.off.Load() {
		return (&redisList{c: s.down, key: s.key}).Add(ctx, e)
	}
	return s.redisList.Add(ctx, e)
}

type env struct {
	srv    *httptest.Server
	list   *switchable
	signer *unsub.Signer
	logs   *observer.ObservedLogs
	now    time.Time
}

func setup(t *testing.T) *env {
	t.Helper()
	r := testenv.NewRedis(t)
	down, err := rdb.Open(r.Mode, r.URL)
	require.NoError(t, err)
	require.NoError(t, down.Close())
	signer, err := unsub.New(strings.Repeat("r", 32))
	require.NoError(t, err)
	core, logs := observer.New(zapcore.DebugLevel)
	list := &switchable{redisList: &redisList{c: r.Client, key: r.Prefix + "suppressions"}, down: down}
	h, err := unsubscribe.New(signer, list, zap.New(core))
	require.NoError(t, err)
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	h.Now = func() time.Time { return now }
	e := echo.New()
	h.Register(e)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &env{srv: srv, list: list, signer: signer, logs: logs, now: now}
}

func (e *env) token(t *testing.T, tenant, rcpt string) string {
	t.Helper()
	tok, err := e.signer.Sign(unsub.Token{Tenant: tenant, Recipient: rcpt, At: e.now})
	require.NoError(t, err)
	return tok
}

type answer struct {
	status int
	header http.Header
	body   string
}

func (e *env) do(t *testing.T, method, tok, ctype string, body io.Reader) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(testenv.Context(t, 10*time.Second), method, e.srv.URL+unsub.Path+tok, body)
	require.NoError(t, err)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

const form = "application/x-www-form-urlencoded"

func oneClick() io.Reader { return strings.NewReader("List-Unsubscribe=One-Click") }

func multipartOneClick(t *testing.T) (string, io.Reader) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	require.NoError(t, w.WriteField("List-Unsubscribe", "One-Click"))
	require.NoError(t, w.Close())
	return w.FormDataContentType(), &b
}

// altered changes one character of tok's payload.
func altered(tok string) string {
	b := []byte(tok)
	if b[2] == 'A' {
		b[2] = 'B'
	} else {
		b[2] = 'A'
	}
	return string(b)
}

// GET shows the button and changes nothing; POST with RFC 8058's body
// suppresses the token's recipient for the token's tenant, reason
// unsubscribe; a forged or altered token is 404 and a wrong body 400 or
// 415, and neither changes anything; a Redis failure is 503, and pressing
// again once Redis is back works.
func TestOneClickUnsubscribe(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		do     func(t *testing.T, e *env, tok string) answer
		status int
		stored bool
		page   string // in the body
	}{
		{"GET shows the button", func(t *testing.T, e *env, tok string) answer { return e.do(t, "GET", tok, "", nil) },
			http.StatusOK, false, `<button id="unsubscribe"`},
		{"GET twice still changes nothing", func(t *testing.T, e *env, tok string) answer {
			e.do(t, "GET", tok, "", nil)
			return e.do(t, "GET", tok, "", nil)
		}, http.StatusOK, false, "r***r@example.com"},
		{"HEAD changes nothing", func(t *testing.T, e *env, tok string) answer { return e.do(t, "HEAD", tok, "", nil) },
			http.StatusOK, false, ""},
		{"POST one-click", func(t *testing.T, e *env, tok string) answer { return e.do(t, "POST", tok, form, oneClick()) },
			http.StatusOK, true, "Unsubscribed"},
		{"POST one-click, multipart", func(t *testing.T, e *env, tok string) answer {
			ct, body := multipartOneClick(t)
			return e.do(t, "POST", tok, ct, body)
		}, http.StatusOK, true, "Unsubscribed"},
		{"POST twice", func(t *testing.T, e *env, tok string) answer {
			e.do(t, "POST", tok, form, oneClick())
			return e.do(t, "POST", tok, form, oneClick())
		}, http.StatusOK, true, "Unsubscribed"},
		{"GET, altered token", func(t *testing.T, e *env, tok string) answer { return e.do(t, "GET", altered(tok), "", nil) },
			http.StatusNotFound, false, "not valid"},
		{"POST, altered token", func(t *testing.T, e *env, tok string) answer {
			return e.do(t, "POST", altered(tok), form, oneClick())
		}, http.StatusNotFound, false, "not valid"},
		{"POST, forged token", func(t *testing.T, e *env, _ string) answer {
			other, err := unsub.New(strings.Repeat("f", 32))
			require.NoError(t, err)
			forged, err := other.Sign(unsub.Token{Tenant: "shop", Recipient: "reader@example.com", At: e.now})
			require.NoError(t, err)
			return e.do(t, "POST", forged, form, oneClick())
		}, http.StatusNotFound, false, "not valid"},
		{"POST, no token", func(t *testing.T, e *env, _ string) answer { return e.do(t, "POST", "x", form, oneClick()) },
			http.StatusNotFound, false, ""},
		{"POST, another body", func(t *testing.T, e *env, tok string) answer {
			return e.do(t, "POST", tok, form, strings.NewReader("List-Unsubscribe=Yes"))
		}, http.StatusBadRequest, false, "not understood"},
		{"POST, empty form", func(t *testing.T, e *env, tok string) answer { return e.do(t, "POST", tok, form, nil) },
			http.StatusBadRequest, false, ""},
		{"POST, not a form", func(t *testing.T, e *env, tok string) answer {
			return e.do(t, "POST", tok, "application/json", strings.NewReader(`{"List-Unsubscribe":"One-Click"}`))
		}, http.StatusUnsupportedMediaType, false, ""},
		{"POST, a body past the bound", func(t *testing.T, e *env, tok string) answer {
			return e.do(t, "POST", tok, form, strings.NewReader("List-Unsubscribe=One-Click&pad="+strings.Repeat("x", unsubscribe.MaxBody)))
		}, http.StatusRequestEntityTooLarge, false, ""},
		{"POST while Redis is down", func(t *testing.T, e *env, tok string) answer {
			e.list.off.Store(true)
			a := e.do(t, "POST", tok, form, oneClick())
			require.Equal(t, "5", a.header.Get("Retry-After"))
			require.Empty(t, e.list.entries(t))
			return a
		}, http.StatusServiceUnavailable, false, "press the button again"},
		{"POST again once Redis is back", func(t *testing.T, e *env, tok string) answer {
			e.list.off.Store(true)
			require.Equal(t, http.StatusServiceUnavailable, e.do(t, "POST", tok, form, oneClick()).status)
			e.list.off.Store(false)
			return e.do(t, "POST", tok, form, oneClick())
		}, http.StatusOK, true, "Unsubscribed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			tok := e.token(t, "shop", "Reader@Example.com")
			a := tc.do(t, e, tok)
			require.Equal(t, tc.status, a.status, a.body)
			require.Contains(t, a.body, tc.page)
			require.NotContains(t, a.body, tok, "the page never shows the token")
			require.Equal(t, "no-store", a.header.Get("Cache-Control"))
			require.Equal(t, "no-referrer", a.header.Get("Referrer-Policy"))
			got := e.list.entries(t)
			if !tc.stored {
				require.Empty(t, got)
			} else {
				require.Equal(t, []suppression.Entry{{Tenant: "shop", Channel: "email", Recipient: "reader@example.com",
					Reason: suppression.Unsubscribe, At: e.now}}, got)
			}
			for _, l := range e.logs.All() {
				line, err := json.Marshal(l.ContextMap())
				require.NoError(t, err)
				require.NotContains(t, l.Message+string(line), tok, "a log line names the token")
				require.NotContains(t, l.Message+string(line), "reader@example.com", "a log line names the address unmasked")
			}
		})
	}
}

// One tenant's reader unsubscribes from that tenant only.
func TestUnsubscribeIsPerTenant(t *testing.T) {
	t.Parallel()
	e := setup(t)
	require.Equal(t, http.StatusOK, e.do(t, "POST", e.token(t, "shop", "a@example.com"), form, oneClick()).status)
	require.Equal(t, http.StatusOK, e.do(t, "POST", e.token(t, "news", "b@example.com"), form, oneClick()).status)
	got := map[string]string{}
	for _, x := range e.list.entries(t) {
		got[x.Tenant] = x.Recipient
	}
	require.Equal(t, map[string]string{"shop": "a@example.com", "news": "b@example.com"}, got)
}
