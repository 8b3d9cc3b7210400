// Package token shares a vendor's access token (WeCom's) between every
// consumer process through Redis: one fetch per expiry across the fleet,
// not one per process or per message.
//
// The token is cached under one key whose TTL ends early (before the
// vendor's expires_in), so it is replaced while the old one still works.
// Whoever finds no token takes a short Redis lock and fetches; the others
// wait for the key. Invalidate drops a token a vendor refused only if it is
// still the current one, so a hundred senders that saw it fail cause one
// refresh. It must never fetch without holding the lock, and never hand out
// a token it did not read from Redis or fetch itself.
package token
