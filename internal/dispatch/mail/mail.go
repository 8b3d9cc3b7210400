// Package mail is the mail channel of the consumer pipeline: it renders a
// message's email and sends it through the mail provider, behind a circuit
// breaker (Guard). It never touches AMQP, claims or status records: the
// pipeline (internal/dispatch) does.
package mail

import (
	"context"

	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/template"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Channel sends email.
type Channel struct {
	channel.Base
	mailer    provider.Mailer
	templates *template.Store
}

// New returns the mail channel sending through m.
func New(m provider.Mailer, templates *template.Store) *Channel {
	return &Channel{mailer: m, templates: templates}
}

// Provider is the mailer's name.
func (c *Channel) Provider() string { return c.mailer.Name() }

// Send renders t's email and sends it.
func (c *Channel) Send(ctx, call context.Context, t *channel.Task) (provider.Receipt, error) {
	msg := t.Msg
	e, err := channel.Render(ctx, func() (template.RenderedEmail, error) {
		return c.templates.RenderEmail(msg.Template, msg.Locale, t.Vars)
	})
	if err != nil {
		return provider.Receipt{}, err
	}
	return channel.Call(call, topology.Mail, c.Provider(), func(ctx context.Context) (provider.Receipt, error) {
		return c.mailer.SendMail(ctx, provider.Mail{To: msg.Recipient, Subject: e.Subject, HTML: e.HTML, Text: e.Text, TaskID: msg.TaskID})
	})
}
