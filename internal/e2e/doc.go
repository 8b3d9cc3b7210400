// Package e2e holds end-to-end tests that run msgpulse's real binaries
// (topology, api, consumer) as separate processes against the real RabbitMQ
// and Redis, and kill them the way production does: SIGTERM for a rolling
// restart, SIGKILL for a crash.
package e2e
