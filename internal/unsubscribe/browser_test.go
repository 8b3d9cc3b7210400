package unsubscribe_test

import (
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/receipt/unsub"
	"github.com/msgpulse/msgpulse/internal/suppression"
	testbrowser "github.com/msgpulse/msgpulse/internal/testenv/browser"
)

// In a real browser (headless Chromium), opening the link, as a mail
// client's preview or a link scanner would, unsubscribes nobody; pressing
// the page's button does, and the page then says so.
func TestBrowserOpensThenPresses(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testbrowser.Start(t)
	link := e.srv.URL + unsub.Path + e.token(t, "shop", "reader@example.com")

	testbrowser.Do(t, ctx, "open the link", chromedp.Navigate(link))
	testbrowser.Do(t, ctx, "wait for the button", chromedp.WaitVisible("#unsubscribe"))
	require.Contains(t, testbrowser.Do(t, ctx, "read the page", chromedp.Text("#what")), "r***r@example.com")
	testbrowser.Do(t, ctx, "open it again", chromedp.Reload())
	testbrowser.Do(t, ctx, "wait for the button again", chromedp.WaitVisible("#unsubscribe"))
	require.Empty(t, e.list.entries(t), "opening the page changed nothing")

	testbrowser.Do(t, ctx, "press the button", chromedp.Click("#unsubscribe"))
	testbrowser.Do(t, ctx, "wait for the answer", chromedp.WaitVisible(`//h1[@id="title" and text()="Unsubscribed"]`))
	require.Equal(t, link, testbrowser.Do(t, ctx, "read the URL", chromedp.Location()), "the form posted to the page's own URL")
	require.Equal(t, []suppression.Entry{{Tenant: "shop", Channel: "email", Recipient: "reader@example.com",
		Reason: suppression.Unsubscribe, At: e.now}}, e.list.entries(t))
}
