package wecom

import (
	"cmp"

	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/provider"
	wecomapi "github.com/msgpulse/msgpulse/internal/provider/wecom"
)

// wecomMessage is what the provider is asked to send for msg (without the
// rendered content).
func wecomMessage(msg *envelope.Message) provider.WeCom {
	// A message from before tenants has none: it was the default tenant's.
	m := provider.WeCom{Mentions: msg.Mentions, TaskID: msg.TaskID, Tenant: cmp.Or(msg.Tenant, apikey.DefaultTenant), Account: msg.Account}
	switch {
	case msg.Robot:
		m.Robot = msg.Recipient
	case len(msg.Recipients) > 0:
		for _, r := range msg.Recipients {
			m.ToUsers = append(m.ToUsers, r.Recipient)
		}
	default:
		m.ToUsers = []string{msg.Recipient}
	}
	return m
}

// refuseNonUsers is the consumer's second look at WeCom recipients
// (issue 43), for messages queued before the API refused "@all" and "a|b"
// lists, or published by anything but the API: WeCom never sees them. A
// single message to one fails, permanently, before any merge (never a
// merged call); a batch's are failed each, as recipients WeCom refused are,
// and the rest go out.
func refuseNonUsers(t *channel.Task, m *provider.WeCom) error {
	if len(m.ToUsers) <= 1 {
		return wecomapi.CheckUsers(m.ToUsers)
	}
	users := m.ToUsers[:0:0]
	for _, u := range m.ToUsers {
		if err := wecomapi.CheckUsers([]string{u}); err != nil {
			t.Reject(map[string]string{u: err.Error()})
			continue
		}
		users = append(users, u)
	}
	if len(users) == 0 {
		return wecomapi.CheckUsers(m.ToUsers)
	}
	m.ToUsers = users
	return nil
}
