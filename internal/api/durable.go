package api

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/rdb"
)

// durable returns once what an accepted request wrote under keys (its
// status record, its idempotency entry, its code; any key of the same hash
// tag will do) is on the Redis replicas that REDIS_WAIT_REPLICAS asks
// for: only then may it be published and answered 202. A master cut off
// from its replicas still answers writes, and the failover that follows
// discards them: without this, the 202's task id would later be unknown
// and a retry with the same Idempotency-Key sent again (issue 46).
// Frequency-control counts are not waited for: losing some is harmless.
//
// keys are keys the request wrote (created or set): the fence also checks
// they are on the master it reached, so that a write the client sent to
// the old master while following a failover is not taken for durable.
func (s *Server) durable(ctx context.Context, keys ...string) error {
	return s.d.Fence.WaitWritten(ctx, writtenKeys(keys)...)
}

// durableDeleted is durable for keys the request deleted (nothing to
// find): only the hash tags count.
func (s *Server) durableDeleted(ctx context.Context, keys ...string) error {
	return s.d.Fence.Wait(ctx, writtenKeys(keys)...)
}

func writtenKeys(keys []string) []string {
	out := keys[:0:0]
	for _, k := range keys {
		if k != "" {
			out = append(out, k)
		}
	}
	return out
}

// notDurable is the 503 of a request whose writes Redis could not make
// durable (durable): they were rolled back and nothing was published.
func notDurable(err error) *apiError {
	why := "its replicas did not acknowledge the writes within REDIS_WAIT_TIMEOUT (a partition or failover may be under way)"
	if refusedForReplicas(err) {
		why = "the Redis master refuses writes for want of replicas (min-replicas-to-write) or is no longer the master"
	}
	return unavailable(err, "message not accepted: Redis could not store it durably: %s; nothing was published, so it is safe to retry", why)
}

// refusedForReplicas says whether Redis refused a write because its
// master has too few replicas in reach (NOREPLICAS, min-replicas-to-write)
// or is a replica now (READONLY, the old master after a failover).
func refusedForReplicas(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		return strings.HasPrefix(msg, "NOREPLICAS") || strings.HasPrefix(msg, "READONLY")
	}
	return false
}

// answerDurable makes an idempotent request's stored answer durable
// before the 202 goes out: lost in a failover, a retry with the same
// Idempotency-Key would publish the task again. The message is queued by
// then, so a failure only leaves that window open: it is logged, and the
// 202 stands.
func (s *Server) answerDurable(ctx context.Context, onceKey string) {
	if err := s.durable(ctx, onceKey); err != nil && !errors.Is(err, rdb.ErrFenceClosed) {
		s.log.Warn("the stored answer of an idempotent request may not survive a Redis failover; a retry would publish the same task ids again, which the consumer's claim sends once", zap.Error(err))
	}
}
