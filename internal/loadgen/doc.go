// Package loadgen measures msgpulse on the machine it runs on, next to the
// raw limit of the same machine measured in the same run (cmd/loadgen,
// make bench):
//
//   - api: max throughput of the real api binary (closed loop) and its
//     latency at a fixed rate (open loop, measured from each request's
//     intended send time so a stall is not hidden), against a bare echo
//     server doing one Redis Lua call and one confirmed publish on a shared
//     pipelined confirm channel, and raw publish and consume+ack rates;
//   - e2e: the real api and consumer against built-in SMTP and SMS webhook
//     sinks, following every accepted message to a sink, the dead-letter
//     queues or nowhere (lost);
//   - consumer: one consumer's throughput on a prefilled queue (no-op, slow
//     and SMTP providers) against raw consume+ack;
//   - delay: delivered − due for a burst and a mix of delays.
//
// Every measurement runs in a vhost and Redis prefix of its own, created
// and deleted by the run, so it never touches a live system's queues.
// Numbers are reported, never asserted (Evaluate marks the targets
// met or missed): on shared machines only ratios measured in the same run
// mean much.
package loadgen
