package status

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The removed set of a DLQ records the dead letters that replay and purge
// took out of it, by fingerprint (dlq.Fingerprint), each with the time it
// was removed. The DLQ tool lists dead letters from the DLQ's log (a
// stream that keeps a copy of each, see topology.DeadLetterLogConfig) and
// leaves out those in this set. A member is kept as long as the log keeps
// the copy it hides, and no longer.

// MarkRemoved adds fingerprints to dlq's removed set and forgets members
// older than keep (the log's retention), in one round trip.
func (s *Store) MarkRemoved(ctx context.Context, dlq string, fingerprints []string, keep time.Duration) error {
	if len(fingerprints) == 0 {
		return nil
	}
	now := time.Now()
	members := make([]redis.Z, len(fingerprints))
	for i, f := range fingerprints {
		members[i] = redis.Z{Score: float64(now.UnixMilli()), Member: f}
	}
	key := s.removedKey(dlq)
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, key, members...)
		p.ZRemRangeByScore(ctx, key, "-inf", "("+strconv.FormatInt(now.Add(-keep).UnixMilli(), 10))
		p.PExpire(ctx, key, keep)
		return nil
	})
	if err != nil {
		return fmt.Errorf("status: mark %d dead letters of %s removed: %w", len(fingerprints), dlq, err)
	}
	return nil
}

// Removed returns dlq's removed set.
func (s *Store) Removed(ctx context.Context, dlq string) (map[string]bool, error) {
	out := map[string]bool{}
	key := s.removedKey(dlq)
	// Paged, so a large set (a big purge) does not make one huge reply.
	const page = 10_000
	for start := int64(0); ; start += page {
		fs, err := s.rdb.ZRange(ctx, key, start, start+page-1).Result()
		if err != nil {
			return nil, fmt.Errorf("status: removed dead letters of %s: %w", dlq, err)
		}
		for _, f := range fs {
			out[f] = true
		}
		if len(fs) < page {
			return out, nil
		}
	}
}
