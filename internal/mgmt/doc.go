// Package mgmt is a small client for the RabbitMQ management HTTP API: the
// broker's observed state (queues with their arguments and depths,
// exchanges, bindings, version) and vhost administration for tests.
//
// It only reads state and manages vhosts and permissions. It must never
// declare or delete queues, exchanges or bindings: the declarer does that
// over AMQP from the topology model, so there is one path that changes the
// topology.
package mgmt
