// Package channel is what the consumer pipeline (internal/dispatch) knows
// of a channel: the one narrow interface a channel's package implements
// (Channel), a job as a channel sees it (Task), and the outcomes a channel
// reports, as errors that the pipeline's one decision reads (Snooze,
// ErrAccountDown, ErrTemplate, ErrRedis, ErrHandedOff).
//
// A channel (mail, sms, wecom) owns its send, its provider's rules, its
// hand-offs (WeCom's merge buffer and media pool) and its outcomes. The
// pipeline around it (claim, provider limit, send timeout, decide, record)
// names no channel.
//
// It must never import the pipeline, AMQP or any channel's package: both
// sides import it, so it stays below them.
package channel
