// Package verify issues and checks verification codes. A code is generated
// from a CSPRNG, stored in Redis only as a keyed digest (package seal) with
// its expiry and failed-attempt count, replaced by the next code for the
// same tenant, channel, recipient and purpose, consumed by the first correct
// check, and burned after too many wrong ones. Every code belongs to the
// tenant of the key that requested it: only that tenant's checks see it.
// A check may tally the code it consumes (the fraud guard's verified codes
// per phone-number prefix) in the script that consumes it.
//
// It must never write a code in clear to Redis or to a log, and never
// compare digests with ==: comparisons are constant-time. It must never
// let one tenant's calls read, count against, burn or replace another
// tenant's code.
package verify
