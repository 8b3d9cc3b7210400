package status

// Every Redis key this package writes is named here (as asynq's
// internal/base names its keys), each under Config.Prefix.

// key is a task's status record. It carries the task's hash tag, like the
// task's claim keys (see claim.Claimer.TaskKey), so that a guarded update
// is one script on a Redis Cluster.
func (s *Store) key(taskID string) string { return s.cfg.Prefix + "status:{" + taskID + "}" }

// batchKey is a batch: the list of its recipients' task IDs, kept as long
// as their records; the records themselves stay the only place a status
// lives.
func (s *Store) batchKey(batchID string) string { return s.cfg.Prefix + "batch:" + batchID }

// removedKey is a DLQ's removed set (removed.go).
func (s *Store) removedKey(dlq string) string { return s.cfg.Prefix + "dlq:removed:" + dlq }

// Key is the key of taskID's record, for a caller that must make its
// write durable (rdb.Fence.Wait).
func (s *Store) Key(taskID string) string { return s.key(taskID) }

// BatchKey is the key of a batch's task list (see Key).
func (s *Store) BatchKey(batchID string) string { return s.batchKey(batchID) }
