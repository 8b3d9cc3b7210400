// Package dispatch is the consumer pipeline (cmd/consumer): it takes a
// delivery, checks it, claims it in Redis so that no two consumers send the
// same message, renders it, sends it through a provider, and decides what
// happens next: ack, a retry through the delay queues, or a reject that the
// broker dead-letters to the channel's DLQ.
//
// That decision is made in one place, decide, with one errors.Is/errors.As
// switch over control errors that carry the step's intent (Snooze, the
// deadline, a malformed body, a provider failure's class).
//
// It never sends without a claim, and with REDIS_WAIT_REPLICAS never
// under one its Redis replicas have not acknowledged (durable.go): a claim
// an isolated master took, and a failover then discarded, would let a
// redelivery send the message again. It never acks a message it did not
// either send, find already sent, pass on (a confirmed retry or snooze),
// or see refused for good by a refusal that is a receipt in itself
// (receipt.RefusedError: 550 5.1.1, Twilio 21610; refused.go), and never
// keeps the only copy of a retry in memory: retries are published to
// RabbitMQ with a confirm before the original is acked.
//
// The pipeline names no channel. Each channel (mail, sms, wecom, in the
// packages of those names below this one) sits behind one interface,
// channel.Channel, registered in channels.go: it owns its send, its
// provider's rules, its hand-offs and its outcomes, and reports them as
// errors decide reads. A WeCom job that must wait (for others to merge
// with, for its media file's download) is handed off, with its claim and
// unsettled delivery, to the channel's merge buffer or media pool, and its
// worker takes the next delivery: whoever holds the job calls its
// Task.Finish (finish here) once its send is done, and the delivery is
// settled then (through its broker.Hold), never before.
//
// The one window no design closes: a crash after the provider accepted a
// message and before the claim is marked sent. The lease then expires and a
// redelivery sends again. That is msgpulse's only source of a duplicate,
// and it is kept to the provider call's return plus one Redis write.
//
// It is not named consumer after cmd/consumer: it dispatches each delivery
// to its channel's sender; "consumer" is the broker's word, taken by
// broker.Consumer, which this package drives.
package dispatch
