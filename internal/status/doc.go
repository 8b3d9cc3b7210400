// Package status keeps the status record of each message (queued, scheduled,
// sending, retrying, sent, failed, expired) in Redis, one hash per task, so
// the API can answer "what happened to my message" while cmd/consumer moves
// it along.
//
// Updates are atomic scripts stamped with Redis server time, so concurrent
// consumers and replicas agree on order and attempt counts. It must never
// move a record out of sent (a late retry or duplicate delivery must not
// make a delivered message look failed), never store an unmasked recipient
// (callers mask it) and never keep a record longer than its TTL after the
// last update.
package status
