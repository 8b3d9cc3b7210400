// Package ratelimit enforces exact sliding-window rate limits and resend
// cooldowns for cmd/api, shared by every API replica through Redis, and keeps
// the admin-managed rate-limit configurations (global and per provider).
//
// A Take checks and records every dimension of a request (per recipient, per
// IP, per API key, global, per provider config...) in one Lua script: either
// all of them admit the request and all record it, or none records anything.
// Time is Redis server time, so replicas with skewed clocks still agree
// (plus Limiter.Advance's offset, which only tests set, to drive windows).
//
// It must never admit more than an exact window's limit within any span of that
// window's length, never record a denied request, and never let a rollback
// remove anything but the rolled-back reservation's own entries (another
// request's cooldown included), nor charge or refuse a request twice when
// its script runs twice (a pipeline sent again after NOSCRIPT or a read
// timeout): a run that finds its own reservation admits without recording
// more. Limits up to the limiter's ExactMax (LIMIT_EXACT_MAX) are exact:
// each rule key holds a sorted-set log of its admitted requests, so its
// memory is bounded by that limit. Larger ones are counted by a
// sliding-window counter (counter.go), which must never admit more than
// the limit in one fixed window, and whose bound is documented there.
//
// Failures limits failed X-API-Key checks per source address the same way
// (a sliding log per address, recorded and judged in one script, before
// the API answers), and never records a refused failure, so its log stays
// at the limit under a flood.
//
// A Take may also carry a Guard (guard.go): the same script judges the
// request's destination (a tenant's phone-number prefix) by its sent and
// verified counts, blocks it when it looks pumped, and refuses it while
// blocked. It must never count a refused request, and never block a
// destination on another's counts.
//
// A Take may also carry a Suppress (suppress.go), and a TakeUpTo one per
// unit: the same script reads the recipient's suppression entry and
// refuses the request (a *SuppressedError) before anything is counted or
// written. It must never write an entry, and never refuse for a reason
// the check excepts (an unsubscribe, for a code).
//
// The take script also keeps the API's Idempotency-Key entries (Once): a
// request finds its key's entry, or reserves it, in the Take it runs
// anyway. It must never let two requests hold one entry, never reserve an
// entry for a refused request, and never forget the ids a released entry
// was published under.
package ratelimit
