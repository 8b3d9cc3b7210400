// Package browser starts the headless Chromium that the browser tests
// drive (the console's pages, the unsubscribe page): Debian's chromium,
// which scripts/browser.sh installs and make test runs first.
//
// It is for tests only, and must never let a test pass without a browser:
// without one the test is skipped, and in CI it fails.
package browser

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// ChromiumPath is Debian's chromium.
const ChromiumPath = "/usr/bin/chromium"

// Start starts Chromium with a fresh profile and returns a context bound
// to it, ended when t ends.
func Start(t testing.TB) context.Context {
	t.Helper()
	if _, err := os.Stat(ChromiumPath); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing: scripts/browser.sh installs it", ChromiumPath)
		}
		t.Skipf("%s is missing: run scripts/browser.sh", ChromiumPath)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(ChromiumPath),
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
	if _, err := chromedp.Run(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// Do runs one action with a deadline, so a missing element fails the
// test instead of hanging it.
func Do[T any](t testing.TB, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}
