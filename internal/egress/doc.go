// Package egress decides which addresses msgpulse may open a connection to
// on a caller's behalf (status callbacks): never loopback, link-local,
// private, unique-local, unspecified, multicast or other non-public
// addresses, unless the deployment allows them for development. The API
// asks it when a callbackUrl arrives, and the consumer's callback client
// asks it again for the address it is about to dial, since DNS can change
// in between.
//
// It only classifies and refuses; it never sends anything, and it imports
// nothing of msgpulse's.
package egress
