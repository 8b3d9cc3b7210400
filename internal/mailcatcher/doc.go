// Package mailcatcher is a real SMTP server that keeps every message it
// receives in memory and shows them on a small web page, so that tests can
// check what msgpulse sent and a developer running `make run` can read the
// email a request produced.
//
// Tests can make it misbehave on purpose (reject the next n messages with
// 451, always answer 550, require AUTH PLAIN) to exercise the SMTP
// provider's error classification over a real connection.
//
// It must never relay or deliver anything anywhere, never listen beyond
// the address it is given (loopback by default), and never be used as a
// production mail server. Unlike the providers it does show message bodies
// and full recipients: standing in for the recipient's inbox is its job.
package mailcatcher
