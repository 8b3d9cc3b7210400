// Package rdb builds the Redis client every msgpulse program shares, from a
// redis://, rediss:// or unix:// URL, with timeouts and a pool size suited to
// a request path that must fail fast rather than queue behind a slow Redis.
// Its Fence makes the writes that a caller is told about durable first.
//
// It never connects at construction (a program starts, and reports Redis
// problems on first use or readiness check) and never puts the URL, which
// may hold a password, into an error.
//
// # Durable writes: the fence
//
// Redis answers a write once its master has it; its replicas get it later.
// A master cut off from its replicas and the other Sentinels (or the other
// Cluster masters) while msgpulse still reaches it goes on answering writes
// until the others fail over; when it rejoins as a replica, those writes
// are discarded (issue 46 measured 248 statuses gone and 100 of 100
// idempotent retries sent twice). The server's min-replicas-to-write and
// min-replicas-max-lag narrow that window to the lag but cannot close it,
// so a write whose loss would break a promise (an idempotency entry, a
// status record, an issued code, a consumer's claim) is followed by
// Fence.WaitWritten before anyone is told it happened: before the API's 202,
// before the consumer calls a provider.
//
// WAIT counts the writes of the connection it runs on, and go-redis pools
// connections, so Wait does not WAIT on the caller's connection: a round
// writes a fence key of its own (same hash tag as the caller's key, so the
// same master on a Cluster) and WAITs for it, on one connection in one
// pipeline. Replication is a single ordered stream per master: a write
// answered before the round's write was sent has a smaller offset, and a
// replica that acknowledged the round's write has it too. Concurrent
// callers share rounds (group commit), one runner per master; a caller
// joins the next round that starts after its call, never one in flight,
// whose write may have gone out before the caller's writes were answered.
//
// That covers the writes the round's master has. During a failover the
// client moves its connections to the new master one by one, so a
// caller's write can go to the old master on one connection while the
// round runs on the new one and passes: the write is lost, the caller
// told it is durable (the partition-redis-master scenario found one such
// status in 671). WaitWritten, for keys the caller created or set, checks
// in the same round, on the same connection, that each key exists on the
// round's master, and fails that caller (ErrNotDurable) when one does not.
// Wait, for keys a caller deleted, checks nothing but their hash tags.
//
// How many replicas: min(REDIS_WAIT_REPLICAS, the replicas the master has
// online by ROLE at the previous round). WAIT for more replicas than are
// connected blocks its whole timeout, so a master that truly has none (its
// replica died; a new master whose old one is dead) would otherwise make
// every request a 503 until a replica returns. That case is the server's:
// min-replicas-to-write refuses writes (NOREPLICAS, the fence's own write
// included) once no replica acknowledged within min-replicas-max-lag. A
// partitioned master keeps counting its silent replicas as connected until
// repl-timeout (60 s by default): WAIT then times out, Wait returns
// ErrNotDurable, and the caller answers 503; once the master drops them,
// min-replicas-to-write refuses. Either way nothing is acknowledged that a
// failover can take back, provided the server sets min-replicas-to-write
// (the shipped configs do). The one round in which a replica that just
// died was still counted fails with ErrNotDurable: one burst of 503s,
// which a retry after Retry-After gets past. WAIT with one replica says one
// replica has the write, not which: Sentinel and Cluster promote the
// replica with the most data, which holds it unless that very replica is
// lost too. A REDIS_WAIT_REPLICAS of 0 (the default for REDIS_MODE=single)
// turns the fence off: Wait sends nothing and returns at once.
package rdb
