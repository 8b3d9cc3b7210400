package status

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// batchScript stores a batch's task list. KEYS: the list. ARGV: ttl ms,
// then the task IDs.
var batchScript = redis.NewScript(`
redis.call('DEL', KEYS[1])
redis.call('RPUSH', KEYS[1], unpack(ARGV, 2))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1`)

// CreateBatch stores a batch's task list and, in the same round trip, the
// new status records recs (as InsertCommands would store them): the
// records of recipients admitted together, which the admitting script no
// longer writes (issue 22: a batch's 1,000 records inside it held Redis
// for about 7 ms, in front of every code's request). They go as
// composites of at most rdb.CompositeMax records; the list is one script.
// Not atomic as a whole: on an error some records may have landed, for
// the caller to delete with the rest of what it undoes.
func (s *Store) CreateBatch(ctx context.Context, batchID string, taskIDs []string, recs ...Record) error {
	if batchID == "" || len(taskIDs) == 0 {
		return errors.New("status: a batch needs an id and at least one task")
	}
	rec := s.comp.Recorder()
	cmds, err := s.queueInserts(ctx, rec, recs)
	if err != nil {
		return err
	}
	args := make([]any, 0, 1+len(taskIDs))
	args = append(args, s.cfg.TTL.Milliseconds())
	for _, id := range taskIDs {
		args = append(args, id)
	}
	cmds = append(cmds, batchScript.Run(ctx, rec, []string{s.batchKey(batchID)}, args...))
	err = s.comp.Exec(ctx, s.rdb, rec)
	for _, c := range cmds {
		if err != nil {
			break
		}
		err = c.Err()
	}
	if err != nil {
		return fmt.Errorf("status: create batch %q: %w", batchID, err)
	}
	return nil
}

// QueueDeleteBatch is DeleteBatch queued on p (see QueueDelete).
func (s *Store) QueueDeleteBatch(ctx context.Context, p redis.Pipeliner, batchID string) func() error {
	cmd := p.Del(ctx, s.batchKey(batchID))
	return func() error {
		if err := cmd.Err(); err != nil {
			return fmt.Errorf("status: delete batch %q: %w", batchID, err)
		}
		return nil
	}
}

// DeleteBatch removes a batch's task list (a batch whose publish failed).
func (s *Store) DeleteBatch(ctx context.Context, batchID string) error {
	if err := s.rdb.Del(ctx, s.batchKey(batchID)).Err(); err != nil {
		return fmt.Errorf("status: delete batch %q: %w", batchID, err)
	}
	return nil
}

// Batch is a batch's task IDs and how many of them are in each state. A
// record that has expired counts as Expired.
type Batch struct {
	ID      string
	TaskIDs []string
	Counts  map[State]int
	// Tenant owns the batch: the tenant of its first task ("" for a record
	// from before tenants, the default tenant). Ownerless is true when that
	// record has expired, so that no owner is known.
	Tenant    string
	Ownerless bool
}

// GetBatch reads a batch, the state of each of its tasks and its owner, in
// two round trips; ErrNotFound if there is no such batch.
func (s *Store) GetBatch(ctx context.Context, batchID string) (Batch, error) {
	ids, err := s.rdb.LRange(ctx, s.batchKey(batchID), 0, -1).Result()
	if err != nil {
		return Batch{}, fmt.Errorf("status: get batch %q: %w", batchID, err)
	}
	if len(ids) == 0 {
		return Batch{}, fmt.Errorf("%w: batch %q", ErrNotFound, batchID)
	}
	cmds := make([]*redis.StringCmd, len(ids))
	var tenant *redis.StringCmd
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HGet(ctx, s.key(id), fStatus)
		}
		tenant = p.HGet(ctx, s.key(ids[0]), fTenant)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Batch{}, fmt.Errorf("status: get batch %q: %w", batchID, err)
	}
	b := Batch{ID: batchID, TaskIDs: ids, Counts: map[State]int{}, Tenant: tenant.Val()}
	b.Ownerless = errors.Is(cmds[0].Err(), redis.Nil)
	for _, c := range cmds {
		st, err := c.Result()
		switch {
		case errors.Is(err, redis.Nil):
			b.Counts[Expired]++
		case err != nil:
			return Batch{}, fmt.Errorf("status: get batch %q: %w", batchID, err)
		default:
			b.Counts[State(st)]++
		}
	}
	return b, nil
}
