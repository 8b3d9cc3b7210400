package dispatch

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/claim"
	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
)

// Dispatcher processes deliveries.
type Dispatcher struct {
	cfg Config
	log *zap.Logger
	now func() time.Time
	// channels sends each topology channel's messages (channels.go).
	channels map[string]channel.Channel
	// renew keeps every lease of this consumer alive in one round trip per
	// tick, instead of a goroutine per message (issue 22).
	renew *claim.Renewer
	hot   hotMetrics
	// burst sends the claims, and the sent marks, of deliveries arriving
	// together as one script (burst.go).
	burst *burst
}

// New validates cfg and returns a Dispatcher.
func New(cfg Config) (*Dispatcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := &Dispatcher{cfg: cfg, log: cfg.Logger, now: time.Now, renew: cfg.Claims.NewRenewer(), hot: newHotMetrics(cfg.Metrics), burst: newBurst(cfg.Redis)}
	d.channels = channels(&d.cfg)
	return d, nil
}

// Drain makes the work handed off (WeCom's merge buffer and media pool)
// finish as soon as it can: merged sends go at once, and media not yet
// downloading come back later (a snooze). Call it when the consumers start
// to stop; they wait for the deliveries it holds (broker.Hold), within
// their grace.
func (d *Dispatcher) Drain() {
	for _, ch := range d.channels {
		ch.Drain()
	}
}

// channel is the channel that sends a topology channel's messages.
func (d *Dispatcher) channel(name string) channel.Channel {
	if ch, ok := d.channels[name]; ok {
		return ch
	}
	return channel.Unconfigured{What: name}
}

func (d *Dispatcher) providerName(channel string) string { return d.channel(channel).Provider() }

// pause waits until Redis answers again. It returns false when ctx ended
// first; the delivery then goes back to the queue untouched.
func (d *Dispatcher) pause(ctx context.Context, cause error) bool {
	d.cfg.Metrics.Paused.Set(1)
	defer d.cfg.Metrics.Paused.Set(0)
	d.log.Warn("Redis unavailable: pausing (nothing is sent or acked without the idempotency check)", zap.Error(cause))
	// A master that answers but cannot make a claim durable answers a
	// PING too: it is asked for what failed, a durable write.
	probe := func(ctx context.Context) error { return d.cfg.Redis.Ping(ctx).Err() }
	var nd *notDurableError
	if errors.As(cause, &nd) && d.cfg.Fence.Replicas() > 0 {
		probe = func(ctx context.Context) error { return d.cfg.Fence.Wait(ctx, nd.key) }
	}
	wait := 100 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := probe(pctx)
		cancel()
		if err == nil {
			d.log.Info("Redis is back: resuming")
			return true
		}
		wait = min(wait*2, 5*time.Second)
	}
}
