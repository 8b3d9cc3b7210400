package config

import (
	"time"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// DLQ configures cmd/dlq, the on-call tool for the dead-letter queues.
type DLQ struct {
	Common
	Model topology.Config
	// CodeSecret opens sealed codes for `dlq show --reveal`; nothing else
	// needs it.
	CodeSecret      string
	CodeSecretIsDev bool
	// ConfirmTimeout bounds the wait for the broker's confirm of one
	// replayed message; a message without a confirm stays in the DLQ.
	ConfirmTimeout time.Duration
	// ScanMax is the most messages one command holds unacknowledged at once
	// (they are all returned when it ends). It bounds what a huge DLQ costs
	// the broker and this process; commands say when they stopped at it.
	ScanMax int
	// StatusTimeout bounds each status-record lookup in Redis. After the
	// first failure the tool stops asking and shows the broker's reasons.
	StatusTimeout time.Duration
}

// LoadDLQ reads cmd/dlq's settings; check l.Err().
func LoadDLQ(lookup func(string) (string, bool)) (DLQ, *envconf.Loader) {
	l := envconf.New(lookup)
	c := DLQ{Common: loadCommon(l), Model: loadTopology(l)}
	c.CodeSecret, c.CodeSecretIsDev = loadCodeSecret(l)
	c.ConfirmTimeout = l.Duration("DLQ_CONFIRM_TIMEOUT", 10*time.Second, 100*time.Millisecond, 5*time.Minute, "longest wait for the broker's confirm of one replayed message (without it the message stays in the DLQ)")
	c.ScanMax = l.Int("DLQ_SCAN_MAX", 100_000, 1, 10_000_000, "most messages one dlq command reads (and holds unacknowledged) from a queue; the rest are left untouched")
	c.StatusTimeout = l.Duration("DLQ_STATUS_TIMEOUT", 2*time.Second, 10*time.Millisecond, time.Minute, "bound on one status-record lookup in Redis (the consumer's reason for a rejection)")
	return c, l
}
