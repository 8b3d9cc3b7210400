// Package envelope is the message msgpulse puts on RabbitMQ: its JSON body,
// its schema version, and the AMQP properties and headers that travel with
// it (message id = taskId, deadline, due time of a delayed delivery).
//
// It is a leaf: the API encodes with it, the consumer, the relay and the DLQ
// tool decode with it, and it imports nothing of msgpulse. It must never hold
// a verification code in clear text: a code travels sealed (see package seal).
package envelope
