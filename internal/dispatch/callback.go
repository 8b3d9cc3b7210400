package dispatch

import (
	"time"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/callback"
	"github.com/msgpulse/msgpulse/internal/callbackkey"
	"github.com/msgpulse/msgpulse/internal/egress"
)

// The consumer's callbacks are package callback's sender, which the API
// process uses too for receipts; these names are the consumer's view of
// it, its results counted in the consumer's Metrics.

// Callbacks POSTs final statuses (callback.Sender).
type Callbacks = callback.Sender

// Callback is the JSON a callbackUrl receives (callback.Payload).
type Callback = callback.Payload

// CallbackConfig configures status callbacks (seed 000); see
// callback.Config, of which it is the consumer's part.
type CallbackConfig struct {
	Keys     callbackkey.Keys
	Timeout  time.Duration // per POST; default 5s
	Attempts int           // default 3
	Backoff  time.Duration // first wait between attempts, doubling; default 1s
	Workers  int           // default 4
	Queue    int           // callbacks waiting at most; default 1000
	Logger   *zap.Logger
	Metrics  *Metrics // its Callbacks counts them
	Egress   egress.Policy
}

// NewCallbacks starts the workers; Close stops them.
func NewCallbacks(cfg CallbackConfig) (*Callbacks, error) {
	c := callback.Config{Keys: cfg.Keys, Timeout: cfg.Timeout, Attempts: cfg.Attempts, Backoff: cfg.Backoff, Workers: cfg.Workers,
		Queue: cfg.Queue, Logger: cfg.Logger, Egress: cfg.Egress}
	if cfg.Metrics != nil {
		c.Results = cfg.Metrics.Callbacks
	}
	return callback.New(c)
}
