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
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/template"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// New returns the mail channel sending through m.
func New(m provider.Mailer, templates *template.Store) channel.Channel {
	return &channel.Rendered[template.RenderedEmail]{
		Channel: topology.Mail,
		Name:    m.Name,
		Render: func(t *channel.Task) (template.RenderedEmail, error) {
			return templates.RenderEmail(t.Msg.Template, t.Msg.Locale, t.Vars)
		},
		Call: func(ctx context.Context, t *channel.Task, e template.RenderedEmail) (provider.Receipt, error) {
			return m.SendMail(ctx, provider.Mail{To: t.Msg.Recipient, Subject: e.Subject, HTML: e.HTML, Text: e.Text, TaskID: t.Msg.TaskID})
		},
	}
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
