// Package api is cmd/api: the HTTP face backend services call. It validates
// input, applies Redis frequency control, issues verification codes, and
// publishes messages to RabbitMQ with publisher confirms, answering 202 only
// for a message the broker confirmed. When a publish fails it rolls back
// everything the request wrote (the code, the rate-limit reservations, the
// status record) and answers 503 with Retry-After, naming the cause; a
// publish whose message may have been kept (no confirm in time) says so.
// Before publishing it admits the message against its level queue's depth
// (broker.Gauge, {CH}_QUEUE_ADMIT_FILL), refusing with 503 rather than
// accepting what drop-head would then throw away. And before publishing,
// what a 202 promises (the status record, the Idempotency-Key entry, the
// code) is made durable on the Redis replicas (durable.go,
// REDIS_WAIT_REPLICAS): a master cut off from its replicas gets a 503 with
// everything rolled back, never a 202 that a failover later forgets.
//
// Every /api route names the scope it needs (send, read, admin) in the
// route table in New, the one place scopes are checked; a key's tenant
// (package apikey) is recorded on every message, and Visible is the one
// check that keeps a tenant's reads to its own messages.
//
// Every response, errors included, is the envelope {"code","msg","data"}.
// The API never sends mail or SMS and never logs a code or a full recipient.
//
// The module's root package api (api/openapi.yaml) is the contract this
// package serves; this one is named after cmd/api, as every program's
// package is, and imports that one as apidoc.
package api
