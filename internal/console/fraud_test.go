package console_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/fraud"
	"github.com/msgpulse/msgpulse/internal/fraud/fraudtest"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

// The fraud guard's page, in a real browser: every tenant's blocks, and a
// lift after a confirmation, which ends the block at once (the next code
// to the prefix is admitted) and leaves the other tenant's alone.
func TestBrowserLiftsAFraudBlock(t *testing.T) {
	h := setup(t)
	r := h.stack.Redis
	lim := ratelimit.New(r.Client, r.Prefix)
	g, err := fraud.New(r.Client, r.Prefix, fraud.Config{}, lim.ClockOffset)
	require.NoError(t, err)
	h.fraud = g
	_, srv := h.serve(t, keys, nil)
	ctx := testenv.Context(t, 60*time.Second)
	shop, _ := fraudtest.Block(t, ctx, g, lim, "shop", "+447400123456")
	_, _ = fraudtest.Block(t, ctx, g, lim, "blog", "+8613812345678")

	shots := t.TempDir()
	if dir := os.Getenv("MSGPULSE_CONSOLE_SHOTS"); dir != "" {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		shots = dir
	}
	b := newBrowser(t)
	b.login(srv.URL)
	b.waitVisible("#queues")
	b.click(`nav a[href="/console/fraud"]`)
	b.waitVisible("#blocks")
	shopRow := `#blocks tr[data-tenant="shop"][data-prefix="+44740012"]`
	blogRow := `#blocks tr[data-tenant="blog"][data-prefix="+861381234"]`
	require.Equal(t, "50", b.text(shopRow+" td.sent"))
	require.Equal(t, "0", b.text(shopRow+" td.verified"))
	require.Equal(t, "unverified", b.text(shopRow+" td.reason"))
	require.Contains(t, b.text(blogRow), "CN")
	b.screenshot(filepath.Join(shots, "fraud-1-blocks.png"))

	b.click(shopRow + " a.lift")
	b.waitVisible("#confirm-lift")
	require.Contains(t, b.text("main"), "Tenant shop, prefix +44740012 (GB)")
	b.screenshot(filepath.Join(shots, "fraud-2-confirm.png"))
	_, err = lim.Take(ctx, ratelimit.Request{Guard: shop})
	require.Error(t, err, "nothing is lifted before the confirmation")
	b.click("#confirm-lift")
	b.waitVisible("#lifted")
	require.Contains(t, b.text("#lifted"), "shop +44740012")
	b.waitVisible(blogRow)
	b.screenshot(filepath.Join(shots, "fraud-3-lifted.png"))
	left, err := g.Blocks(ctx, "")
	require.NoError(t, err)
	require.Len(t, left, 1)
	require.Equal(t, "blog", left[0].Tenant, "the other tenant's block stays")
	_, err = lim.Take(ctx, ratelimit.Request{Guard: shop})
	require.NoError(t, err, "the next code to the lifted prefix is admitted")
	t.Logf("screenshots in %s", shots)
}
