package console_test

import (
	"context"
	"os"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	testbrowser "github.com/msgpulse/msgpulse/internal/testenv/browser"
)

// browser drives one headless Chromium with a fresh profile.
type browser struct {
	t   *testing.T
	ctx context.Context
}

// newBrowser starts Chromium (testenv/browser: skipped without one,
// except in CI, where a missing browser is a failure).
func newBrowser(t *testing.T) *browser {
	t.Helper()
	return &browser{t: t, ctx: testbrowser.Start(t)}
}

// do runs one action with a deadline, so a missing element fails the
// test instead of hanging it.
func do[T any](b *browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	return testbrowser.Do(b.t, b.ctx, what, a)
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
