package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/provider/wecom/wecomtest"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/pkg/client"
)

// Issue 37: the API's WECOM_ACCOUNTS is optional, and without it every
// tenant's message names default; a consumer whose default belongs to shop
// sent blog's from shop's corp. The consumer refuses it now, for good, as
// the API would have.
func TestConsumerKeepsAnAccountToItsTenants(t *testing.T) {
	srv := wecomtest.New(t)
	srv.AddApp("corp-shop", "corp-shop-secret-1", 4001)
	s := newSystem(t, tenantKeys())
	_, _ = s.api() // no WECOM_ACCOUNTS
	s.consumer("c1", "CHANNELS=mail,sms,wecom", "WECOM_API_BASE="+srv.URL, "WECOM_ACCOUNTS=default=corp-shop:4001:corp-shop-secret-1@shop")
	shop, err := client.New(s.apiURL, shopKey)
	require.NoError(t, err)
	blog, err := client.New(s.apiURL, blogKey)
	require.NoError(t, err)
	ctx := testenv.Context(t, 60*time.Second)
	vars := map[string]string{"title": "t", "content": "c"}
	mine, err := shop.SendMessage(ctx, client.SendRequest{MessageType: client.MessageWeCom, TemplateCode: "notice", Recipient: "shopper", Variables: vars})
	require.NoError(t, err)
	theirs, err := blog.SendMessage(ctx, client.SendRequest{MessageType: client.MessageWeCom, TemplateCode: "notice", Recipient: "blogger", Variables: vars})
	require.NoError(t, err)
	testenv.WaitFor(t, 20*time.Second, "blog's message failed", func() bool {
		m, err := blog.GetMessage(ctx, theirs.TaskID)
		require.NoError(t, err)
		return m.Status == client.Status("failed")
	})
	m, err := blog.GetMessage(ctx, theirs.TaskID)
	require.NoError(t, err)
	require.Equal(t, "permanent", m.Reason)
	require.Contains(t, m.LastError, `not listed for tenant "blog"`)
	testenv.WaitFor(t, 20*time.Second, "shop's message sent", func() bool {
		m, err := shop.GetMessage(ctx, mine.TaskID)
		require.NoError(t, err)
		return m.Status == client.Status("sent")
	})
	require.Equal(t, []wecomtest.App{{CorpID: "corp-shop", AgentID: 4001}}, srv.From("shopper"))
	require.Empty(t, srv.From("blogger"), "nothing sent from shop's corp for blog")
}
