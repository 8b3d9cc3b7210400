package console_test

import (
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/suppression"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

// setupSuppressions is a console with a suppression list holding one
// entry of shop and one of blog.
func setupSuppressions(t *testing.T) (*harness, *suppression.Store, string) {
	t.Helper()
	h := setup(t)
	r := h.stack.Redis
	st, err := suppression.New(r.Client, suppression.Config{Prefix: r.Prefix})
	require.NoError(t, err)
	h.suppressions = st
	ctx := testenv.Context(t, 30*time.Second)
	at := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	require.NoError(t, st.Add(ctx, suppression.Entry{Tenant: "shop", Channel: "email", Recipient: "bounce@example.com", Reason: suppression.HardBounce, Code: "5.1.1", TaskID: "t-1", At: at}))
	require.NoError(t, st.Add(ctx, suppression.Entry{Tenant: "blog", Channel: "sms", Recipient: "+14155550100", Reason: suppression.OptOut, Code: "21610", At: at}))
	_, srv := h.serve(t, keys, nil)
	return h, st, srv.URL
}

// The suppression page, in a real browser: every tenant's entries, a
// filter, and a Remove that takes only its own row off the list.
func TestBrowserRemovesASuppression(t *testing.T) {
	_, st, base := setupSuppressions(t)
	ctx := testenv.Context(t, 60*time.Second)
	shots := t.TempDir()
	if dir := os.Getenv("MSGPULSE_CONSOLE_SHOTS"); dir != "" {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		shots = dir
	}
	b := newBrowser(t)
	b.login(base)
	b.waitVisible("#queues")
	b.click(`nav a[href="/console/suppressions"]`)
	b.waitVisible("#suppressions")
	shopRow := `#suppressions tr[data-tenant="shop"][data-recipient="bounce@example.com"]`
	blogRow := `#suppressions tr[data-tenant="blog"][data-recipient="+14155550100"]`
	require.Equal(t, "hard_bounce", b.text(shopRow+" td.reason"))
	require.Equal(t, "5.1.1", b.text(shopRow+" td.code"))
	require.Equal(t, "opt_out", b.text(blogRow+" td.reason"))
	b.screenshot(filepath.Join(shots, "suppressions-1-list.png"))

	// Filtering reads, and removes nothing.
	b.typeInto(`#filter input[name="tenant"]`, "blog")
	b.click(`#filter button`)
	b.waitVisible(blogRow)
	require.NotContains(t, b.text("#suppressions"), "bounce@example.com")
	_, ok, err := st.Get(ctx, "shop", "email", "bounce@example.com")
	require.NoError(t, err)
	require.True(t, ok)

	b.open(base + "/console/suppressions")
	b.waitVisible(shopRow)
	b.click(shopRow + " form.remove button")
	b.waitVisible("#removed")
	require.Contains(t, b.text("#removed"), "shop email")
	require.NotContains(t, b.text("#removed"), "bounce@example.com", "the banner masks the recipient")
	b.waitVisible(blogRow)
	b.screenshot(filepath.Join(shots, "suppressions-2-removed.png"))
	_, ok, err = st.Get(ctx, "shop", "email", "bounce@example.com")
	require.NoError(t, err)
	require.False(t, ok, "removed")
	_, ok, err = st.Get(ctx, "blog", "sms", "+14155550100")
	require.NoError(t, err)
	require.True(t, ok, "the other tenant's entry stays")
	t.Logf("screenshots in %s", shots)
}

// A remove from no session, or without the session's CSRF token,
// removes nothing; with it, it removes the entry.
func TestSuppressionRemoveNeedsCSRF(t *testing.T) {
	_, st, base := setupSuppressions(t)
	ctx := context.Background()
	form := url.Values{"tenant": {"shop"}, "channel": {"email"}, "recipient": {"bounce@example.com"}}
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func() int {
		resp, err := c.PostForm(base+"/console/suppressions/remove", form)
		require.NoError(t, err)
		_ = readBody(t, resp)
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, post())
	require.Equal(t, http.StatusSeeOther, loginAt(t, base, c, testName, testKey).StatusCode)
	require.Equal(t, http.StatusForbidden, post())
	form.Set("csrf", "not-the-token")
	require.Equal(t, http.StatusForbidden, post())
	_, ok, err := st.Get(ctx, "shop", "email", "bounce@example.com")
	require.NoError(t, err)
	require.True(t, ok, "nothing removed")

	resp, err := c.Get(base + "/console/suppressions")
	require.NoError(t, err)
	page := readBody(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	form.Set("csrf", between(page, `name="csrf" value="`, `"`))
	require.Equal(t, http.StatusSeeOther, post())
	_, ok, err = st.Get(ctx, "shop", "email", "bounce@example.com")
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, http.StatusNotFound, post(), "a second remove finds nothing")
}
