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

// ReasonNotScanned counts messages whose reason was not read: beyond the
// scan cap, or in the DLQ but not in its log (older than DLQ_LOG_MAX_AGE,
// or dead before the log existed).
const ReasonNotScanned = "not_scanned"

// DefaultScanMax is Stats' cap on dead letters read per queue's log.
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
// death time. The total is the queue's depth (a passive declare); reasons
// and times come from the queue's log (see readLog), so counting spends
// no delivery attempt however often it is polled. st may be nil (reasons
// are then the broker's and malformed, and what replay and purge removed
// is known only from the depth). Messages the log does not have, or
// beyond DefaultScanMax, are counted as not_scanned.
func Stats(ctx context.Context, conn *amqp.Connection, m *topology.Model, st *status.Store) ([]QueueStats, error) {
	t := NewTool(conn, m, st, ToolConfig{})
	reps, err := t.Stats(ctx, DeadLetterQueues(m), DefaultScanMax)
	out := make([]QueueStats, len(reps))
	for i, r := range reps {
		out[i] = r.QueueStats
	}
	return out, err
}

// Stats counts the given DLQs by reason, reading at most scanMax entries
// of each log (0 = all).
func (t *Tool) Stats(ctx context.Context, queues []string, scanMax int) ([]StatsReport, error) {
	out := make([]StatsReport, 0, len(queues))
	for _, q := range queues {
		rep := StatsReport{QueueStats: QueueStats{Queue: q, Channel: t.model.ChannelOfQueue(q), ByReason: map[string]int{}}, ByBrokerReason: map[string]int{}, ByHour: map[time.Time]int{}}
		v, err := t.readLog(ctx, q, func(d *amqp.Delivery, present bool) error {
			if !present {
				return nil
			}
			e := t.x.inspect(ctx, q, d).Entry
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
			if scanMax > 0 && rep.Scanned >= scanMax {
				return errStop
			}
			return nil
		})
		if err != nil {
			return out, fmt.Errorf("stats of %s: %w", q, err)
		}
		// The depth is the total; what the log does not have (retention,
		// or older than the log) or the cap stopped is said, not guessed.
		rep.Total = max(v.Depth, rep.Scanned)
		if rest := rep.Total - rep.Scanned; rest > 0 {
			rep.ByReason[ReasonNotScanned] = rest
			rep.ByBrokerReason[ReasonNotScanned] = rest
		}
		out = append(out, rep)
	}
	return out, nil
}
