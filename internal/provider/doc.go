// Package provider defines what a sending vendor is to msgpulse: a Mailer,
// an SMSSender or a WeComSender that takes one rendered message (for WeCom,
// one message to up to 1000 users) and either accepts it (naming the users
// WeCom refused) or returns an *Error that says whether trying again can
// help.
//
// Providers talk to vendors (SMTP servers, SMS and WeCom HTTP APIs) and
// nothing else:
// they must never touch AMQP, Redis or status records, never retry on their
// own beyond one request's transport, and never log a message body or a
// full recipient. The dispatcher owns retries, idempotency and outcomes.
package provider
