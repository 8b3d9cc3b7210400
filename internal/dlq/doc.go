// Package dlq is cmd/dlq, the on-call tool for msgpulse's dead-letter
// queues: it counts what they hold by reason (stats, also served by the
// API), lists and shows dead letters with the broker's and the consumer's
// account of why they died, replays them to their channel, and purges them,
// optionally after exporting them to a file.
//
// Reading never spends a dead letter. A quorum queue counts every message
// it hands out and gets back toward its delivery limit (every return on
// RabbitMQ 3.x and 4.0–4.2; basic.reject from 4.3; 4.x sets the limit to
// 20 by default) and then drops the message, so a tool that read a quorum
// DLQ by taking messages and giving them back (nack with requeue), as this
// one did, emptied the queue it was asked to look at: with delivery-limit
// 3 the fourth read lost the message. No AMQP 0-9-1 read form of a quorum
// queue avoids that before 4.3, and the management API's "get messages"
// is the same take-and-requeue. So reads do not touch the DLQ at all:
//
//   - Counts: the DLQ's depth from a passive declare (also what the API's
//     GET /api/dlq/stats reports as total).
//   - Reasons, lists, details, exports: the DLQ's log (queue.{ch}.dlq.log,
//     topology.DeadLetterLogConfig), a classic queue the topology binds to
//     the same dead-letter exchange with the same key, so the broker puts
//     every dead letter in both, including those it makes itself (TTL,
//     drop-head, delivery limit) with no code of ours running. A classic
//     queue has no delivery limit, so the log is read the old way (basic.get,
//     held, given back in order) at no cost to anything. A stream would be
//     read without taking anything, but RabbitMQ 3.10 does not dead-letter
//     into streams. The consumer's status record (the reason it wrote when
//     it rejected) refines the broker's reason, as before.
//   - What is still there: replay and purge, the only commands that remove
//     dead letters, consume the DLQ itself and record each removed message's
//     Fingerprint in a Redis set (status.Store.MarkRemoved) kept as long as
//     the log keeps copies. A read leaves those out; if the DLQ then holds
//     fewer than remain (removed while Redis was down, purged from the
//     management UI), the oldest are taken as gone, since a DLQ is FIFO.
//     Copies older than the log's retention (DLQ_LOG_MAX_AGE) are counted
//     from the depth but cannot be listed; replay and purge still reach them.
//
// Replay and purge read the DLQ with basic.get on one channel, holding
// every delivery unacknowledged. What they do not act on they give back
// on a classic DLQ; on a quorum DLQ, where a give-back would count, they
// put back a confirmed fresh copy and ack the original (passer), so
// replaying one id at a time does not wear out the others. They stop at
// the depth they saw when they started, so a queue that grows while they
// read (or the copies they put back) cannot keep them reading for ever.
// A replay's dry run is a read and goes to the log.
//
// It must never lose a message: it acks a dead letter only after the
// broker confirmed its republished copy (replay) or after the copy was
// written and fsynced to an export file (purge --export), or when the
// operator asked for its deletion with --yes. Anything interrupted comes
// back to the DLQ, so the worst case is a duplicate. It never prints or
// logs a verification code, except the one --reveal opens (printed, never
// logged), and it masks recipients in listings. Queue names come only from
// the topology model.
package dlq
