package dlq

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// QueueStats is what one dead-letter queue holds.
type QueueStats struct {
	Queue    string         `json:"queue"`
	Channel  string         `json:"channel"` // topology channel: mail, sms, or "" (relay DLQ)
	Total    int            `json:"total"`
	ByReason map[string]int `json:"byReason"` // refined reasons; they sum to Total
	Oldest   *time.Time     `json:"oldest,omitempty"`
	Newest   *time.Time     `json:"newest,omitempty"`
}

// ReasonNotScanned counts messages beyond the scan cap, whose reason was
// not read.
const ReasonNotScanned = "not_scanned"

// DefaultScanMax is Stats' cap on messages read per queue.
const DefaultScanMax = 100_000

// StatsReport is QueueStats plus what `dlq stats` and the console show
// besides.
type StatsReport struct {
	QueueStats
	ByBrokerReason map[string]int `json:"byBrokerReason"`
	Scanned        int            `json:"scanned"`
	// ByHour counts deaths by the hour (UTC) they happened in, for the
	// console's over-time view.
	ByHour map[time.Time]int `json:"-"`
}

// DeadLetterQueues returns every DLQ of the model: the channels' and the
// relay's.
func DeadLetterQueues(m *topology.Model) []string {
	var out []string
	for _, q := range m.Queues {
		if q.Role == topology.RoleDeadLetter || q.Role == topology.RoleRelayDeadLetter {
			out = append(out, q.Name)
		}
	}
	return out
}

// Stats counts every DLQ's messages by reason, with the oldest and newest
// death time. It reads each queue with basic.get and gives every message
// back (it acks nothing); it keeps counts only, never bodies. st may be nil
// (reasons are then the broker's and malformed). A queue of more than
// DefaultScanMax messages has the rest counted as not_scanned.
//
// Two readers of one queue at once each see only part of it (what the
// other holds is not ready), so concurrent calls may undercount; nothing
// is lost either way.
func Stats(ctx context.Context, conn *amqp.Connection, m *topology.Model, st *status.Store) ([]QueueStats, error) {
	reps, err := stats(ctx, conn, newInspector(m, st, 0, nil), DeadLetterQueues(m), DefaultScanMax)
	out := make([]QueueStats, len(reps))
	for i, r := range reps {
		out[i] = r.QueueStats
	}
	return out, err
}

// Stats counts the given DLQs by reason, reading at most scanMax
// messages of each (0 = all) and giving every one back.
func (t *Tool) Stats(ctx context.Context, queues []string, scanMax int) ([]StatsReport, error) {
	return stats(ctx, t.conn, t.x, queues, scanMax)
}

func stats(ctx context.Context, conn *amqp.Connection, x *inspector, queues []string, scanMax int) ([]StatsReport, error) {
	out := make([]StatsReport, 0, len(queues))
	for _, q := range queues {
		rep := StatsReport{QueueStats: QueueStats{Queue: q, Channel: x.model.ChannelOfQueue(q), ByReason: map[string]int{}}, ByBrokerReason: map[string]int{}, ByHour: map[time.Time]int{}}
		r, err := scan(ctx, conn, q, scanMax, nil, func(_ *reader, d *amqp.Delivery) (bool, error) {
			e := x.inspect(ctx, q, d).Entry
			rep.Scanned++
			rep.ByReason[e.Reason]++
			br := e.BrokerReason
			if br == "" {
				br = ReasonUnknown
			}
			rep.ByBrokerReason[br]++
			if t := e.DeathTime; t != nil {
				rep.ByHour[t.UTC().Truncate(time.Hour)]++
				if rep.Oldest == nil || t.Before(*rep.Oldest) {
					rep.Oldest = t
				}
				if rep.Newest == nil || t.After(*rep.Newest) {
					rep.Newest = t
				}
			}
			return false, nil
		})
		if err != nil {
			return out, fmt.Errorf("stats of %s: %w", q, err)
		}
		// The depth at the start is the total; what scanning did not reach
		// (the cap, or messages another reader held) is said, not guessed.
		rep.Total = max(r.depth, rep.Scanned)
		if rest := rep.Total - rep.Scanned; rest > 0 {
			rep.ByReason[ReasonNotScanned] = rest
			rep.ByBrokerReason[ReasonNotScanned] = rest
		}
		out = append(out, rep)
	}
	return out, nil
}
