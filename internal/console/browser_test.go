package console_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// chromiumPath is Debian's chromium, which scripts/browser.sh installs
// (`make test` runs it first).
const chromiumPath = "/usr/bin/chromium"

// browser drives one headless Chromium with a fresh profile.
type browser struct {
	t   *testing.T
	ctx context.Context
}

// newBrowser starts Chromium; without it the test is skipped, except in
// CI, where a missing browser is a failure (make test installs it).
func newBrowser(t *testing.T) *browser {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing: scripts/browser.sh installs it", chromiumPath)
		}
		t.Skipf("%s is missing: run scripts/browser.sh", chromiumPath)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 860),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first run starts the browser and binds it to the context it is
	// given: this one, not a deadline of one step.
	_, err := chromedp.Run(ctx, chromedp.Navigate("about:blank"))
	require.NoError(t, err, "start chromium")
	return &browser{t: t, ctx: ctx}
}

// do runs one action with a deadline, so a missing element fails the
// test instead of hanging it.
func do[T any](b *browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	require.NoError(b.t, err, what)
	return v
}

func (b *browser) open(url string) { b.t.Helper(); do(b, "open "+url, chromedp.Navigate(url)) }
func (b *browser) waitVisible(sel string) {
	b.t.Helper()
	do(b, "wait for "+sel, chromedp.WaitVisible(sel))
}
func (b *browser) click(sel string) { b.t.Helper(); do(b, "click "+sel, chromedp.Click(sel)) }
func (b *browser) typeInto(sel, text string) {
	b.t.Helper()
	do(b, "type into "+sel, chromedp.SendKeys(sel, text))
}
func (b *browser) text(sel string) string {
	b.t.Helper()
	return do(b, "read "+sel, chromedp.Text(sel))
}

// screenshot saves the whole page as PNG (quality 100 is PNG; less is JPEG).
// login opens the console at base and signs in with the test key, as a
// person would: the key's name and the key in the form.
func (b *browser) login(base string) {
	b.t.Helper()
	b.open(base + "/console")
	b.waitVisible("#login")
	b.typeInto("#name", testName)
	b.typeInto("#key", testKey)
	b.click("#login-submit")
}

func (b *browser) screenshot(path string) {
	b.t.Helper()
	png := do(b, "screenshot", chromedp.FullScreenshot(100))
	require.NoError(b.t, os.WriteFile(path, png, 0o600))
}
