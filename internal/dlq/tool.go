package dlq

import (
	"io"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Tool is the code behind every dlq command: Stats, List, Show, Replay,
// Purge and Export. cmd/dlq prints what it returns; the web console
// (internal/console) renders it. Both go through the same reading rules,
// so neither can lose or reorder a dead letter the other would not.
//
// A Tool is for one caller at a time (its inspector caches and counts per
// run); the console makes one per request.
type Tool struct {
	cfg   config.DLQ
	log   *zap.Logger
	conn  *amqp.Connection
	model *topology.Model
	st    *status.Store // nil: no status records, no removed set
	x     *inspector
	now   func() time.Time
	// who names the person acting in the audit log lines of replay,
	// purge and reveal: the OS user for cmd/dlq, the API key's name for
	// the console.
	who  zap.Field
	warn func(string)
	// afterConfirm runs after the n-th replayed message was confirmed and
	// before it is acked; an error stops the replay there, as a crash
	// would (the message is then both republished and still in the DLQ).
	afterConfirm func(n int) error
	// wrapExport wraps the export file's writer (to make it fail).
	wrapExport func(io.Writer) io.Writer
}

// ToolConfig is what a Tool needs besides its connections.
type ToolConfig struct {
	// DLQ are cmd/dlq's settings: AMQPURL (replay publishes on a
	// connection of its own), ConfirmTimeout, ScanMax, StatusTimeout and,
	// for Show's reveal only, CodeSecret.
	DLQ config.DLQ
	// Who names the caller in audit log lines, e.g.
	// zap.String("api_key", name).
	Who zap.Field
	Log *zap.Logger
	// Warn receives what an operator should know about a run (Redis
	// unavailable, a message without a sealed code). Optional.
	Warn func(string)
	Now  func() time.Time // optional
}

// NewTool reads the DLQs over conn, which the caller owns. st may be nil:
// reasons are then the broker's (and malformed).
func NewTool(conn *amqp.Connection, m *topology.Model, st *status.Store, tc ToolConfig) *Tool {
	if tc.Log == nil {
		tc.Log = zap.NewNop()
	}
	if tc.Now == nil {
		tc.Now = time.Now
	}
	if tc.Warn == nil {
		tc.Warn = func(string) {}
	}
	return &Tool{cfg: tc.DLQ, log: tc.Log, conn: conn, model: m, st: st, x: newInspector(m, st, tc.DLQ.StatusTimeout, tc.Warn),
		now: tc.Now, who: tc.Who, warn: tc.Warn}
}

// Options select the messages a command acts on and say how.
type Options struct {
	IDs    []string      // message ids (= taskIds)
	All    bool          // every message
	Reason string        // only this reason (the broker's or the consumer's)
	Since  time.Duration // only messages that died within this long
	Limit  int           // act on at most this many (0 = all selected)
	// Replay only.
	Rate   float64 // republishes per second; 0 = unlimited
	DryRun bool
	Force  bool // also past-deadline and malformed messages
}

// Worn reports how many messages this Tool read with a delivery count at
// or above DeliveryCountWarn, and the highest count seen.
func (t *Tool) Worn() (n, highest int64) { return t.x.worn, t.x.wornMax }
