// Package bounce is msgpulse's bounce receiver: an SMTP server (emersion/
// go-smtp) for MAIL_BOUNCE_DOMAIN, the host its MX points at, run by the
// API process when BOUNCE_SMTP_ADDR is set. Mail servers send it delivery
// status notifications (RFC 3464 DSNs) to the signed VERP address a
// message went out with, and feedback loops send it complaint reports (RFC
// 5965 ARF); it reads them (parse.go, with the standard library: see
// docs/bounces.md for why not go-sisimai) and hands each finding to a
// receipt.Applier as a receipt.Receipt.
//
// What it promises an MTA: 250 only once the Applier stored what the mail
// said (or said the message is unknown); 451 when it could not (Redis
// down), so the MTA keeps the mail and tries again. A mail that names no
// message of ours (a token that does not verify, a made-up address at the
// bounce domain, a vacation reply) is answered 250 and discarded: it
// changes nothing, and the answer tells a forger nothing.
//
// It must never take mail for another domain (550), never apply anything
// a signed token does not name, never hold more than its bounds (message
// size, recipients, connections, time), and never log a token, a full
// address or a message body.
package bounce
