package telemetry

import (
	"net/http"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/propagation"
)

// tableCarrier carries the W3C headers in an AMQP header table. The values
// are strings, as AMQP longstr; a header of another type is ignored.
type tableCarrier amqp.Table

func (c tableCarrier) Get(key string) string {
	v, _ := c[key].(string)
	return v
}

func (c tableCarrier) Set(key, value string) { c[key] = value }

func (c tableCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

func propagationHeader(h http.Header) propagation.HeaderCarrier { return propagation.HeaderCarrier(h) }
