// Package sms holds msgpulse's SMS vendors (log, webhook, Aliyun Dysmsapi,
// Tencent Cloud SMS, Twilio), each a provider.SMSSender chosen by name, and
// a Router that puts a circuit breaker in front of a primary vendor and an
// optional fallback.
//
// Each sender turns one rendered provider.SMS into one signed HTTP request
// and the vendor's answer into a Receipt or a classified *provider.Error, so
// the dispatcher can decide between retrying, backing off and giving up.
//
// What it must never do: touch AMQP, Redis or status records; retry on its
// own (the dispatcher owns retries); log or return a message text, a
// template parameter or a full recipient (use logging.Mask, and scrub vendor
// messages, which sometimes echo the number back); put a secret anywhere but
// the signature; panic on bad input. The log sender is the one exception to
// "never write the text": it exists to print messages in development, and
// writes them to the io.Writer it was given, never to the zap logger.
package sms
