// Package fault holds msgpulse's fault-injection suite (`make test-faults`):
// scenarios that run a steady load through the real API and consumer
// binaries, the real RabbitMQ and Redis, and an in-test SMTP sink, break one
// thing the way production breaks it, and then count.
//
// Every scenario counts, by taskId: accepted (202s), received by the SMTP
// sink (the mailer puts X-Msgpulse-Task-Id on every mail), duplicates,
// dead-lettered and expired (read back from the channel's DLQ without
// consuming it), and lost = accepted − received − dead − expired. It asserts
// lost == 0 and duplicates == 0 (one scenario hits, on purpose, the one
// window where a duplicate cannot be prevented, and expects exactly one),
// and prints one line per scenario:
//
//	FAULT scenario=<name> accepted=… received=… duplicates=… dead=… expired=… lost=… 503s=… delivered503=… …
//
// The faults go through testenv.FaultProxy, which sits between the
// component under test and RabbitMQ, Redis or SMTP and cuts, delays or
// blackholes that component's traffic only; the shared services are never
// restarted. Process faults (SIGKILL, SIGTERM) hit the real binaries, which
// TestMain builds.
//
// The scenarios are skipped unless MSGPULSE_FAULTS is set, because one of
// them raises a broker-wide memory alarm that would stall every other test
// publishing to the same RabbitMQ (it restores the broker's previous
// setting when it ends, and TestMain repairs what a killed run left). They
// run one after another; see docs/faults.md.
//
// This package has no production code: only this file and tests.
package fault
