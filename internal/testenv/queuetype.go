package testenv

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgpulse/msgpulse/internal/topology"
)

// QueueType is the queue type that tests declare where the type is not
// their subject: TEST_QUEUE_TYPE, classic (the default) or quorum. make
// test runs the broker's suites once with each, so a behaviour that holds
// on one type only is found by the leg of the other. A test whose subject
// is one type (the quorum delivery limit, a classic log queue) pins it and
// says why.
var QueueType = topology.QueueType(env("TEST_QUEUE_TYPE", string(topology.Classic)))

// checkQueueType fails every test of a run whose TEST_QUEUE_TYPE is
// neither type, instead of letting them run on a default.
func checkQueueType() error {
	if QueueType != topology.Classic && QueueType != topology.Quorum {
		return fmt.Errorf("TEST_QUEUE_TYPE=%q: must be classic or quorum", QueueType)
	}
	return nil
}

// Topology is topology.DefaultConfig() with the run's QueueType: the model
// a test declares.
func Topology() topology.Config {
	c := topology.DefaultConfig()
	c.QueueType = QueueType
	return c
}

// QueueEnv is the setting that gives a program under test the run's
// QueueType ("QUEUE_TYPE=quorum"), for the environment it is started with.
func QueueEnv() string { return "QUEUE_TYPE=" + string(QueueType) }

// QueueArgs is the declare arguments of a test's own queue (one outside the
// model) of the run's type, with args added. Quorum queues are durable and
// never exclusive: declare them so.
func QueueArgs(args amqp.Table) amqp.Table {
	out := amqp.Table{topology.ArgQueueType: string(QueueType)}
	for k, v := range args {
		out[k] = v
	}
	return out
}

// Overshoot is how many messages past its x-max-length a queue of the
// run's type may take before it refuses them (x-overflow reject-publish):
// none for a classic queue; a quorum queue applies its bound after the fact
// (docs/configuration.md, Quorum queues), and took one more than its bound on RabbitMQ
// 3.10.8 and 4.0.5 when publishes came one at a time. A test that fills a
// queue to see it refuse counts with this, not with the classic bound.
func Overshoot() int {
	if QueueType == topology.Quorum {
		return 2
	}
	return 0
}

// runDefaultQueueType is the default queue type (default_queue_type) of
// a test's vhost when the test names none: the run's QueueType when that
// is quorum, as a team that runs quorum queues sets it (Amazon MQ 4.2 does
// by default). From RabbitMQ 4.0 (not on 3.10) every queue declared
// without x-queue-type takes it, so the quorum legs find a queue that
// should be classic and is not. On a classic run, the broker's own.
func runDefaultQueueType() string {
	if QueueType == topology.Quorum {
		return string(topology.Quorum)
	}
	return ""
}
