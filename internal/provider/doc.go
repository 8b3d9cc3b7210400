// Package provider defines what a sending vendor is to msgpulse: a Mailer
// or an SMSSender that takes one rendered message and either accepts it or
// returns an *Error that says whether trying again can help.
//
// Providers talk to vendors (SMTP servers, SMS HTTP APIs) and nothing else:
// they must never touch AMQP, Redis or status records, never retry on their
// own beyond one request's transport, and never log a message body or a
// full recipient. The dispatcher owns retries, idempotency and outcomes.
package provider
