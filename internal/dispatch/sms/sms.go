// Package sms is the SMS channel of the consumer pipeline: it renders a
// message's text and sends it through the SMS provider (a router over
// vendors, each behind its own breaker). It never touches AMQP, claims or
// status records: the pipeline (internal/dispatch) does.
package sms

import (
	"context"

	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/template"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Channel sends SMS.
type Channel struct {
	channel.Base
	sender    provider.SMSSender
	templates *template.Store
}

// New returns the SMS channel sending through s.
func New(s provider.SMSSender, templates *template.Store) *Channel {
	return &Channel{sender: s, templates: templates}
}

// Provider is the sender's name.
func (c *Channel) Provider() string { return c.sender.Name() }

// Send renders t's text and sends it; the vendor gets the template's name
// and variables too (for vendors that render on their side).
func (c *Channel) Send(ctx, call context.Context, t *channel.Task) (provider.Receipt, error) {
	msg := t.Msg
	text, err := channel.Render(ctx, func() (string, error) {
		return c.templates.RenderSMS(msg.Template, msg.Locale, t.Vars)
	})
	if err != nil {
		return provider.Receipt{}, err
	}
	return channel.Call(call, topology.SMS, c.Provider(), func(ctx context.Context) (provider.Receipt, error) {
		return c.sender.SendSMS(ctx, provider.SMS{To: msg.Recipient, Text: text, TaskID: msg.TaskID, Template: msg.Template, Params: t.Vars})
	})
}
