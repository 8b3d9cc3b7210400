// Package fraud keeps SMS verification codes from being abused for SMS
// pumping (artificially inflated traffic to number ranges an attacker
// earns from): the policy of which numbers a tenant's codes may go to
// (number types, countries), and the guard that watches each tenant's
// destination prefixes, blocks one whose codes are sent and not verified
// or whose traffic leaps far above its own baseline, and lists and lifts
// blocks.
//
// The guard's judgement runs inside the limiter's take script
// (ratelimit.Guard), so it costs a code request no round trip, and its
// state is in Redis, one hash tag per tenant and prefix: every API replica
// sees every block at once, and a Redis Cluster spreads the prefixes.
//
// It must never let one tenant's traffic block, list or lift another
// tenant's prefix, and never count a refused code.
package fraud
