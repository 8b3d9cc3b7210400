package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/provider/wecom/wecomtest"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/pkg/client"
)

// Tenants shop and blog, each with its own key.
const (
	shopKey = "shop-key-0123456789abcdefgh"
	blogKey = "blog-key-0123456789abcdefgh"
)

func tenantKeys() string {
	return "API_KEYS=e2e:" + apiKey + ":send+read+admin,shop/app:" + shopKey + ":send+read,blog/app:" + blogKey + ":send+read"
}

// Issue 37: tenant shop's 40 images, served a byte a second, held every
// send worker for 30 s, and none of tenant blog's 40 texts went out in
// 40 s. With the defaults (the servers are on loopback, which the
// development switches allow): every one of blog's is sent within 5 s of
// being accepted, and each of shop's fails, for good, naming the slow
// download, within the bound docs/wecom.md gives: a download below
// WECOM_MEDIA_MIN_RATE fails 3 to 3.75 s after it starts, and a tenant's
// downloads run 4 at a time, so its n-th slow file fails within about
// ceil(n/4) × 3.75 s of being accepted.
func TestSlowMediaOfOneTenantNeverStallsAnother(t *testing.T) {
	drip := testenv.Drip(t)
	srv := wecomtest.New(t)
	s := newSystem(t, tenantKeys(), "CALLBACK_ALLOW_PRIVATE=true")
	_, _ = s.api("CALLBACK_ALLOW_HTTP=true")
	s.consumer("c1", weComEnv(srv)...)
	shop, err := client.New(s.apiURL, shopKey)
	require.NoError(t, err)
	blog, err := client.New(s.apiURL, blogKey)
	require.NoError(t, err)
	ctx := testenv.Context(t, 120*time.Second)

	const n = 40
	images := make([]string, n)
	texts := make([]string, n)
	accepted := map[string]time.Time{}
	for i := range n {
		res, err := shop.SendMessage(ctx, client.SendRequest{MessageType: client.MessageWeCom, Recipient: fmt.Sprintf("shop%02d", i),
			Media: &client.WeComMedia{Type: "image", URL: drip.URL + "/img/" + strconv.Itoa(i) + ".png"}})
		require.NoError(t, err)
		images[i] = res.TaskID
		accepted[res.TaskID] = time.Now()
	}
	for i := range n {
		res, err := blog.SendMessage(ctx, client.SendRequest{MessageType: client.MessageWeCom, TemplateCode: "notice", Recipient: fmt.Sprintf("blog%02d", i),
			Variables: map[string]string{"title": "post", "content": strconv.Itoa(i)}})
		require.NoError(t, err)
		texts[i] = res.TaskID
		accepted[res.TaskID] = time.Now()
	}
	sent := reached(t, blog, texts, "sent", 30*time.Second)
	for i, id := range texts {
		took := sent[id].Sub(accepted[id])
		require.Less(t, took, 5*time.Second, "blog's text %d sent %s after it was accepted", i, took)
		require.Len(t, srv.ReceivedBy(fmt.Sprintf("blog%02d", i)), 1)
	}

	failed := reached(t, shop, images, "failed", 90*time.Second)
	for _, id := range images {
		m, err := shop.GetMessage(ctx, id)
		require.NoError(t, err)
		require.Contains(t, m.LastError, "media download too slow", id)
		require.Equal(t, "permanent", m.Reason, id)
	}
	var last time.Duration
	for i, id := range images {
		took := failed[id].Sub(accepted[id])
		last = max(last, took)
		// The bound, and the time this test polls at and the machine
		// takes; each failed download counted once (no retry).
		bound := time.Duration((i/4)+1)*3750*time.Millisecond + 10*time.Second
		require.Less(t, took, bound, "shop's image %d failed %s after it was accepted", i, took)
		require.Empty(t, srv.ReceivedBy(fmt.Sprintf("shop%02d", i)))
	}
	t.Logf("blog's 40 texts all sent within %s of being accepted; shop's 40 slow images all failed within %s", maxOf(sent, accepted, texts), last)
	require.Zero(t, srv.Uploads(), "nothing of the slow files uploaded")
	m, err := shop.GetMessage(ctx, images[0])
	require.NoError(t, err)
	require.True(t, strings.Contains(m.LastError, "WECOM_MEDIA_MIN_RATE") || strings.Contains(m.LastError, "WECOM_MEDIA_FETCH_TIMEOUT"), m.LastError)
	require.Equal(t, 1, m.Attempts, "a slow download is not retried")
}

// reached polls ids until each has status, and returns when it saw each
// reach it.
func reached(t *testing.T, c *client.Client, ids []string, status string, within time.Duration) map[string]time.Time {
	t.Helper()
	ctx := testenv.Context(t, within+10*time.Second)
	at := map[string]time.Time{}
	testenv.WaitFor(t, within, fmt.Sprintf("%d messages %s", len(ids), status), func() bool {
		for _, id := range ids {
			if _, ok := at[id]; ok {
				continue
			}
			m, err := c.GetMessage(ctx, id)
			require.NoError(t, err)
			if m.Status == client.Status(status) {
				at[id] = time.Now()
			}
		}
		return len(at) == len(ids)
	})
	return at
}

func maxOf(done, start map[string]time.Time, ids []string) time.Duration {
	var m time.Duration
	for _, id := range ids {
		m = max(m, done[id].Sub(start[id]))
	}
	return m
}
