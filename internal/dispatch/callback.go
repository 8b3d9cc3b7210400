package dispatch

import "github.com/msgpulse/msgpulse/internal/callback"

// The consumer's callbacks are package callback's sender, which the API
// process uses too for receipts; these names are the consumer's view of
// it, its results counted in the consumer's Metrics.

// Callbacks POSTs final statuses (callback.Sender).
type Callbacks = callback.Sender

// Callback is the JSON a callbackUrl receives (callback.Payload).
type Callback = callback.Payload

// CallbackConfig configures status callbacks (seed 000): callback.Config,
// its results counted by Results (the consumer's Metrics.Callbacks).
type CallbackConfig = callback.Config

// NewCallbacks starts the workers; Close stops them.
func NewCallbacks(cfg CallbackConfig) (*Callbacks, error) { return callback.New(cfg) }
