// Package mail is the mail channel of the consumer pipeline: it renders a
// message's email and sends it through the mail provider, behind a circuit
// breaker (Guard). It never touches AMQP, claims or status records: the
// pipeline (internal/dispatch) does.
package mail

import (
	"context"
	"errors"

	"github.com/msgpulse/msgpulse/internal/breaker"
	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/receipt/unsub"
	"github.com/msgpulse/msgpulse/internal/template"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// New returns the mail channel sending through m. links, when set
// (PUBLIC_BASE_URL), gives notices at normal and low their one-click
// unsubscribe link (listUnsubscribe); nil sends none.
func New(m provider.Mailer, templates *template.Store, links *unsub.Links) channel.Channel {
	return &channel.Rendered[template.RenderedEmail]{
		Channel: topology.Mail,
		Name:    m.Name,
		Render: func(t *channel.Task) (template.RenderedEmail, error) {
			return templates.RenderEmail(t.Msg.Template, t.Msg.Locale, t.Vars)
		},
		Call: func(ctx context.Context, t *channel.Task, e template.RenderedEmail) (provider.Receipt, error) {
			return m.SendMail(ctx, provider.Mail{To: t.Msg.Recipient, Subject: e.Subject, HTML: e.HTML, Text: e.Text, TaskID: t.Msg.TaskID,
				ListUnsubscribe: listUnsubscribe(links, t.Msg)})
		},
	}
}

// listUnsubscribe is the List-Unsubscribe link of msg: a notice at normal
// or low, the bulk mail Gmail's sender rules ask one-click unsubscribe of.
// A code and a high notice (a password reset, a security alert) get none,
// so that no reader opts out of them by a mail client's button; nor does
// a message without a tenant, which no suppression entry could name. A
// link that cannot be signed is left out: the address it would name
// cannot be sent to either, and the provider says so.
func listUnsubscribe(links *unsub.Links, msg *envelope.Message) string {
	if links == nil || msg.Kind != envelope.Notification || msg.Tenant == "" {
		return ""
	}
	switch topology.Level(msg.Level) {
	case topology.Normal, topology.Low:
	default:
		return ""
	}
	u, err := links.URL(msg.Tenant, msg.Recipient)
	if err != nil {
		return ""
	}
	return u
}

// Guard puts a circuit breaker in front of a mailer (seed 000): when
// the SMTP server keeps failing, sends stop for a while and messages wait in
// the retry path instead of piling onto a dead server.
type Guard struct {
	provider.Mailer
	Breaker *breaker.Breaker
}

func (g Guard) SendMail(ctx context.Context, m provider.Mail) (provider.Receipt, error) {
	ok, retryIn := g.Breaker.Allow()
	if !ok {
		return provider.Receipt{}, &provider.Error{Provider: g.Name(), Class: provider.Transient, Code: "circuit_open",
			Message: "circuit breaker open after repeated failures", RetryAfter: retryIn, Err: breaker.ErrOpen}
	}
	r, err := g.Mailer.SendMail(ctx, m)
	var pe *provider.Error
	switch {
	case ctx.Err() != nil:
		// We gave up (shutdown, send timeout): says nothing about the server.
	case err == nil:
		g.Breaker.Success()
	case errors.As(err, &pe) && pe.Class != provider.Transient:
		// A rejected recipient or a throttle says the server is alive.
		g.Breaker.Success()
	default:
		g.Breaker.Failure()
	}
	return r, err
}
