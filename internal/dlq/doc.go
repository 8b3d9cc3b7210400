// Package dlq is cmd/dlq, the on-call tool for msgpulse's dead-letter
// queues: it counts what they hold by reason (stats, also served by the
// API), lists and shows dead letters with the broker's and the consumer's
// account of why they died, replays them to their channel, and purges them,
// optionally after exporting them to a file.
//
// It reads a DLQ with basic.get on one channel, holding every delivery
// unacknowledged, and gives back what it did not act on (nack with
// requeue), so reading changes nothing but the redelivered flag (and, on
// quorum queues, possibly the delivery count). It stops at the depth it
// saw when it started, so a queue that grows while it reads cannot keep it
// reading for ever.
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
