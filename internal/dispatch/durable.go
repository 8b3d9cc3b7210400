package dispatch

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/msgpulse/msgpulse/internal/claim"
	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	"github.com/msgpulse/msgpulse/internal/rdb"
)

// notDurableError is a claim Redis answered but could not make durable: its
// replicas did not acknowledge it in time (rdb.ErrNotDurable), or the
// master refused it for want of replicas (NOREPLICAS) or is a replica now
// (READONLY). A failover could give the claim's key to no one, and a
// redelivery would then send the message again. key is the claim's key:
// the paused worker probes that master with a fence round (pause).
type notDurableError struct {
	key string
	err error
}

func (e *notDurableError) Error() string { return "claim not durable: " + e.err.Error() }
func (e *notDurableError) Unwrap() error { return e.err }

// notDurableIf wraps err in a notDurableError when Redis refused the claim
// for want of replicas, and returns it unchanged otherwise.
func notDurableIf(key string, err error) error {
	var re redis.Error
	if errors.As(err, &re) {
		if msg := re.Error(); strings.HasPrefix(msg, "NOREPLICAS") || strings.HasPrefix(msg, "READONLY") {
			return &notDurableError{key: key, err: err}
		}
	}
	return err
}

// durable waits until cl's lease is on the replicas REDIS_WAIT_REPLICAS
// asks for, before anything is sent. When it is not, nothing is sent: the
// claim is released (on a master that loses it in a failover anyway, no
// matter) and the worker pauses until a fence round passes, then runs the
// delivery again, as for any Redis failure. A provider is called only
// under a claim that a failover cannot take back.
func (d *Dispatcher) durable(ctx context.Context, cl *claim.Claim) error {
	if err := d.cfg.Fence.WaitWritten(ctx, cl.Key()); err != nil {
		d.release(ctx, cl)
		if !errors.Is(err, rdb.ErrFenceClosed) {
			err = &notDurableError{key: cl.Key(), err: err}
		}
		return fmt.Errorf("%w: %w", channel.ErrRedis, err)
	}
	return nil
}
