package envelope

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Death is one x-death entry: RabbitMQ keeps one per (queue, reason), most
// recent first, counting repeats.
type Death struct {
	Reason      string     `json:"reason"`
	Queue       string     `json:"queue"`
	Exchange    string     `json:"exchange"`
	RoutingKeys []string   `json:"routingKeys,omitempty"`
	Count       int64      `json:"count"`
	Time        *time.Time `json:"time,omitempty"`
}

// Deaths reads the x-death header, most recent first. Entries of a shape
// it does not know are skipped rather than guessed at.
func Deaths(h amqp.Table) []Death {
	list, _ := h[HeaderXDeath].([]any)
	out := make([]Death, 0, len(list))
	for _, e := range list {
		t, ok := e.(amqp.Table)
		if !ok {
			continue
		}
		d := Death{}
		d.Reason, _ = t["reason"].(string)
		d.Queue, _ = t["queue"].(string)
		d.Exchange, _ = t["exchange"].(string)
		d.Count, _ = HeaderInt(t, "count")
		if keys, ok := t["routing-keys"].([]any); ok {
			for _, k := range keys {
				if s, ok := k.(string); ok {
					d.RoutingKeys = append(d.RoutingKeys, s)
				}
			}
		}
		if ts, ok := t["time"].(time.Time); ok {
			ts = ts.UTC()
			d.Time = &ts
		}
		out = append(out, d)
	}
	return out
}

// firstDeath reads x-first-death-*, which RabbitMQ sets once, on the first
// dead-lettering, and never changes.
func firstDeath(h amqp.Table) (Death, bool) {
	get := func(k string) string { s, _ := h[HeaderFirstDeathPfx+k].(string); return s }
	d := Death{Reason: get("reason"), Queue: get("queue"), Exchange: get("exchange")}
	return d, d.Reason != ""
}

// DeathFrom picks the death that put the message into a DLQ fed by the
// queues from: the most recent x-death entry from one of them. x-first-death
// is not it when the message had died before (a round-up delay hop
// expires into the main queue, leaving an "expired" first death on a
// message the consumer later rejected). Falls back to the most recent
// entry, then to x-first-death-*.
func DeathFrom(h amqp.Table, from map[string]bool) (Death, bool) {
	ds := Deaths(h)
	for _, d := range ds {
		if from[d.Queue] {
			return d, true
		}
	}
	if len(ds) > 0 {
		return ds[0], true
	}
	return firstDeath(h)
}
