// Package declare is cmd/topology: it declares the topology model on a
// broker (after checking that nothing existing conflicts with it), shows
// the plan of what a declare would change, and exports the model as
// RabbitMQ definitions JSON.
//
// It never deletes or changes an existing resource: when the broker holds
// something different from the model, it stops before declaring anything
// and tells the operator the safe ways forward.
//
// It is not named topology after its command because internal/topology is
// the model itself, which every program (the API, the consumer, the DLQ
// tool) builds its queues' names from; this package is only the command
// that puts that model on a broker: it declares.
package declare
