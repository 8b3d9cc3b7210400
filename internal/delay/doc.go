// Package delay delivers messages later, on RabbitMQ alone: tiered
// DLX+TTL delay queues and a precise per-message-TTL queue (seed 003,
// scheme C), with two modes.
//
// In exact mode (the default) a delay is composed of several tier hops,
// largest first, and the relay, between hops, re-plans from the message's
// due time (x-due-at). The remainder below the smallest tier (16 ms by
// default) goes through the precise queue, so its head-of-line blocking is
// bounded by that tier. In round-up mode a delay takes one queue, exactly
// as the seed says: the precise queue below the threshold, else the
// smallest tier that is not shorter.
//
// Every hop is published with a confirm and only then acknowledged, so a
// hop is at-least-once; the consumer's idempotency absorbs duplicates. The
// package never drops a delayed message: a full delay queue refuses the
// publish (reject-publish), which the publisher reports and counts.
package delay
