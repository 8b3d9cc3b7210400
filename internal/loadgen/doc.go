// Package loadgen measures msgpulse on the machine it runs on: API request
// latency at a fixed rate (against a /healthz baseline measured in the same
// run), consumer throughput with a no-op provider and with a real SMTP
// server, and delayed-delivery accuracy (delivered − due) for a mix of
// delays and for a burst due at the same instant.
//
// Every measurement runs in a vhost and Redis prefix of its own, created
// and deleted by the run, so it never touches a live system's queues.
// Numbers are printed, never asserted: on shared machines only ratios
// measured in the same run mean much.
package loadgen
