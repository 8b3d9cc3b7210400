package mail_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	mailchannel "github.com/msgpulse/msgpulse/internal/dispatch/mail"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/mailcatcher"
	"github.com/msgpulse/msgpulse/internal/provider/mail"
	"github.com/msgpulse/msgpulse/internal/receipt/unsub"
	"github.com/msgpulse/msgpulse/internal/template"
	"github.com/msgpulse/msgpulse/internal/topology"
)

const base = "https://msg.example.com"

// setup starts a mail catcher and the mail channel sending to it through
// the real SMTP mailer; links nil is a consumer without PUBLIC_BASE_URL.
func setup(t *testing.T, withLinks bool) (channel.Channel, *mailcatcher.Server, *unsub.Signer) {
	t.Helper()
	cc := mailcatcher.DefaultConfig()
	cc.SMTPAddr = "127.0.0.1:0"
	srv, err := mailcatcher.New(cc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	host, port, err := net.SplitHostPort(srv.Addr())
	require.NoError(t, err)
	cfg := mail.DefaultConfig()
	cfg.Host = host
	cfg.Port, err = strconv.Atoi(port)
	require.NoError(t, err)
	m, err := mail.New(cfg, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	tpl, err := template.Load("", "en")
	require.NoError(t, err)
	signer, err := unsub.New(strings.Repeat("r", 32))
	require.NoError(t, err)
	var links *unsub.Links
	if withLinks {
		links = &unsub.Links{Base: base, Signer: signer}
	}
	return mailchannel.New(m, tpl, links), srv, signer
}

func notice(level topology.Level, tenant string) *channel.Task {
	return &channel.Task{
		Msg: &envelope.Message{TaskID: "n-" + string(level), Kind: envelope.Notification, Channel: "mail", Recipient: "Reader@Example.com",
			Template: "notice", Tenant: tenant, Level: string(level)},
		Level: level,
		Vars:  map[string]string{"title": "News", "content": "Hello"},
	}
}

func code() *channel.Task {
	return &channel.Task{
		Msg:   &envelope.Message{TaskID: "c-1", Kind: envelope.Verification, Channel: "mail", Recipient: "reader@example.com", Template: "verify_code", Tenant: "shop"},
		Level: topology.Code,
		Vars:  map[string]string{"code": "123456", "ttlMinutes": "5"},
	}
}

// Notices at normal and low carry both RFC 8058 headers, their link naming
// the tenant and the normalised recipient; codes and high notices carry
// neither, nor does anything when PUBLIC_BASE_URL is unset.
func TestUnsubscribeHeadersByKindAndLevel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		links bool
		task  *channel.Task
		want  bool
	}{
		{"a low notice", true, notice(topology.Low, "shop"), true},
		{"a normal notice", true, notice(topology.Normal, "shop"), true},
		{"a high notice", true, notice(topology.High, "shop"), false},
		{"a code", true, code(), false},
		{"a notice without a tenant", true, notice(topology.Low, ""), false},
		{"a low notice, no PUBLIC_BASE_URL", false, notice(topology.Low, "shop"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch, srv, signer := setup(t, tc.links)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := ch.Send(ctx, ctx, tc.task)
			require.NoError(t, err)
			require.Equal(t, 1, srv.Count())
			got := srv.Messages()[0]
			lu, post := got.Header("List-Unsubscribe"), got.Header("List-Unsubscribe-Post")
			if !tc.want {
				require.Empty(t, lu)
				require.Empty(t, post)
				return
			}
			require.Equal(t, "List-Unsubscribe=One-Click", post)
			tok, ok := strings.CutPrefix(lu, "<"+base+unsub.Path)
			require.True(t, ok, lu)
			tok, ok = strings.CutSuffix(tok, ">")
			require.True(t, ok, lu)
			named, err := signer.Verify(tok)
			require.NoError(t, err)
			require.Equal(t, "shop", named.Tenant)
			require.Equal(t, "reader@example.com", named.Recipient)
		})
	}
}
