// Package status keeps the status record of each message in Redis, one
// hash per task, so the API can answer "what happened to my message" while
// cmd/consumer moves it along (queued, scheduled, sending, retrying, sent,
// failed, expired) and receipts tell what happened after the send
// (delivered, undelivered, bounced, complained; receipt.go).
//
// Updates are atomic scripts stamped with Redis server time, so concurrent
// consumers, replicas and receipt receivers agree on order and attempt
// counts. It must never move a record out of sent or a receipt state
// except by a receipt, by the rules in receipt.go (a late retry or
// duplicate delivery must not make a sent message look failed, a late
// "sent" must not undo "delivered"), never store an unmasked recipient
// (callers mask it; a receipt is matched by a keyed digest), never put a
// record's callback URL in JSON, and never keep a record longer than its
// TTL after the last update.
package status
