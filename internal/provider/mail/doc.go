// Package mail is msgpulse's email provider: a provider.Mailer that sends
// each rendered email over SMTP (github.com/wneessen/go-mail), keeping a
// small pool of open connections so a steady stream of messages does not
// pay for a TCP, TLS and AUTH handshake each time. A message costs a
// pooled connection one round trip when the server offers PIPELINING and
// CHUNKING (RFC 2920 and 3030: MAIL FROM, RCPT TO, BDAT and the message in
// one write), two when it offers PIPELINING alone (MAIL FROM, RCPT TO and
// DATA in one write, then the body), four when it offers neither; no RSET
// follows a completed transaction.
//
// Every failure comes back as a *provider.Error whose Class says what
// retrying can do (see classify.go for the table); the dispatcher decides
// whether and when to retry. The only retry done here is the transport one
// the provider contract allows: a pooled connection the server had already
// closed is redialled once, before anything of the message was accepted.
//
// It must never touch AMQP, Redis or status records, never retry a message
// on its own beyond that, and never log a message body, a subject or a full
// recipient address (logging.Mask).
package mail
