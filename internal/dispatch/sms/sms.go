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

// New returns the SMS channel sending through s. The vendor gets the
// template's name and variables too, for vendors that render on their
// side.
func New(s provider.SMSSender, templates *template.Store) channel.Channel {
	return &channel.Rendered[string]{
		Channel: topology.SMS,
		Name:    s.Name,
		Render: func(t *channel.Task) (string, error) {
			return templates.RenderSMS(t.Msg.Template, t.Msg.Locale, t.Vars)
		},
		Call: func(ctx context.Context, t *channel.Task, text string) (provider.Receipt, error) {
			return s.SendSMS(ctx, provider.SMS{To: t.Msg.Recipient, Text: text, TaskID: t.Msg.TaskID, Template: t.Msg.Template, Params: t.Vars})
		},
	}
}
