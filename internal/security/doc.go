// Package security holds msgpulse's cross-cutting security tests: the ones
// that need the API and the consumer together, or that check the code base
// as a whole. It runs both programs in-process (api.Run, dispatch.Run)
// against the real RabbitMQ and Redis, with an in-test SMTP server and SMS
// webhook, and checks what they log, what they accept as configuration and
// how they speak TLS.
//
// It has no production code; what it guarantees is written in SECURITY.md
// at the repository root.
package security
