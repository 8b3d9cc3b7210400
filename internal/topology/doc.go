// Package topology is the one model of msgpulse's RabbitMQ resources: every
// exchange, queue, binding and argument, with the names the API, the
// consumer, the relay, the DLQ tool and the declarer all read from here.
//
// It is a leaf: pure data and pure functions (build the model from a Config,
// compare it with an observed broker state, export it as definitions JSON).
// It must never open a connection, read the environment, or let a caller
// spell a resource name itself: a name typed twice is a name that drifts.
package topology
