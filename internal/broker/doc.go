// Package broker is msgpulse's only door to RabbitMQ: a supervised
// connection that reconnects with backoff, a publisher that reports success
// only after a broker confirm, consumers with manual acknowledgement, and
// the primitives that declare the topology model, and a gauge of queue
// depths (passive declares) for admission.
//
// Rules it keeps, from amqp091-go's documentation: every Notify channel is
// buffered and always drained; a publish waits for its confirm before the
// channel is closed or reused; nothing blocks forever on a blocked
// connection; a nack fails only the message it names (see lane). It reads
// resource names only from the topology model, and it
// never decides what a message means: ack, retry and dead-letter decisions
// belong to the dispatcher.
package broker
