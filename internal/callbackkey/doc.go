// Package callbackkey is the tenants' callback keys and the callback
// signature: which key signs a tenant's status callbacks (an explicit one
// from CALLBACK_SECRETS, else one derived from CALLBACK_SECRET), the exact
// string that is signed, and its verification, as a receiver does it.
//
// A tenant is handed its callback key, so a key must open nothing else: it
// is never CODE_SECRET nor derived from it (that secret signs console
// sessions and seals codes), and one tenant's key says nothing about
// another's (a derived key is an HMAC of the tenant's name under
// CALLBACK_SECRET, which is never handed out). It imports nothing of
// msgpulse's, so that pkg/client can verify callbacks with it.
package callbackkey
