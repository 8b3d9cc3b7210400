// Package claim gives cmd/consumer crash-safe at-most-once sending: before
// sending a message a consumer claims its idempotency key with a lease, keeps
// the lease alive while it sends, and marks the key sent afterwards. A
// consumer that crashes mid-send leaves a lease that expires, so a
// redelivery can be sent by another consumer instead of being blocked for
// the whole dedup period, as a plain SETNX with a long TTL would.
//
// It must never let two live owners hold one key, never let an owner that
// lost its lease extend, release or overwrite another owner's lease, and
// never forget that a message was sent: MarkSent records it even when the
// lease was lost, because the message went out. Keys hold a digest of a
// verification code, never the code.
package claim
