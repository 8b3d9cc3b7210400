// Package sms is the SMS channel of the consumer pipeline: it renders a
// message's text and sends it through the SMS provider (a router over
// vendors, each behind its own breaker), and, when a send succeeded,
// queues the vendor's message id → the task on the sent mark's round trip,
// so that the vendor's delivery report finds its message. It never
// touches AMQP, claims or status records: the pipeline (internal/dispatch)
// does.
package sms

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/receipt/smslookup"
	"github.com/msgpulse/msgpulse/internal/template"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Lookup stores a vendor message id → the task and its number
// (smslookup.Store): the SMS hooks read it when a report comes.
type Lookup interface {
	QueuePut(ctx context.Context, p redis.Scripter, vendor, id string, e smslookup.Entry) func() error
}

// Channel sends SMS and remembers the vendor's id of each sent one.
type Channel struct {
	*channel.Rendered[string]
	lookup Lookup
}

// sent is the task's State once a vendor accepted it: who, and its id.
type sent struct{ vendor, id string }

// New returns the SMS channel sending through s. The vendor gets the
// template's name and variables too, for vendors that render on their
// side. lookup, when not nil, gets each sent message's vendor id (nil: no
// delivery report will find its message).
func New(s provider.SMSSender, templates *template.Store, lookup Lookup) *Channel {
	return &Channel{lookup: lookup, Rendered: &channel.Rendered[string]{
		Channel: topology.SMS,
		Name:    s.Name,
		Render: func(t *channel.Task) (string, error) {
			return templates.RenderSMS(t.Msg.Template, t.Msg.Locale, t.Vars)
		},
		Call: func(ctx context.Context, t *channel.Task, text string) (provider.Receipt, error) {
			rc, err := s.SendSMS(ctx, provider.SMS{To: t.Msg.Recipient, Text: text, TaskID: t.Msg.TaskID, Template: t.Msg.Template, Params: t.Vars})
			if err == nil && rc.MessageID != "" && rc.Provider != "" {
				t.State = sent{vendor: rc.Provider, id: rc.MessageID}
			}
			return rc, err
		},
	}}
}

// QueueSent queues the vendor id's entry on the sent mark's round trip
// (channel.SentWriter).
func (c *Channel) QueueSent(ctx context.Context, p redis.Scripter, t *channel.Task) func() error {
	st, ok := t.State.(sent)
	if !ok || c.lookup == nil || t.Msg == nil {
		return nil
	}
	return c.lookup.QueuePut(ctx, p, st.vendor, st.id, smslookup.Entry{TaskID: t.Msg.TaskID, Recipient: t.Msg.Recipient})
}
