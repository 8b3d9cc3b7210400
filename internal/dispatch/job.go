package dispatch

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/claim"
	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/telemetry"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// job is one delivery on its way through the pipeline.
type job struct {
	channel  string
	level    topology.Level // of the queue it came from
	del      *amqp.Delivery
	msg      *envelope.Message // nil when the body is malformed
	provider string            // the provider that sent or failed

	// ch sends it; task is the job as ch sees it (its message, the
	// recipients refused for good, ch's own state of it).
	ch   channel.Channel
	task channel.Task

	claim           *claim.Claim // ours, once the provider accepted the message
	sendingRecorded bool         // the "sending" status rode with the claim
	// sending is closed once a batch's "sending" statuses, written while
	// its call is in flight, are in (nil when none is being written).
	sending chan struct{}

	// A job may be handed off by its channel (WeCom's merge buffer and
	// media pool) and finished by whoever holds it (finish). queue names
	// its queue, span is the handler's; hold is its delivery's
	// broker.Hold (nil: its queue has no room to hand off, see
	// Channel.Holds).
	queue string
	span  telemetry.Span
	hold  *broker.Hold
	// claimed is the claim held while the send is in flight, and
	// stopRenew stops renewing its lease (afterSend).
	claimed   *claim.Claim
	stopRenew func()
	sendStart time.Time
}

// taskIDs are the status records a job's outcome is written to: the
// message's own, or each recipient's of a WeCom batch.
func (j *job) taskIDs() []string {
	if j.msg == nil {
		return []string{j.del.MessageId}
	}
	if len(j.msg.Recipients) == 0 {
		return []string{j.msg.TaskID}
	}
	ids := make([]string, len(j.msg.Recipients))
	for i, r := range j.msg.Recipients {
		ids[i] = r.TaskID
	}
	return ids
}

// recipientAt is the i-th recipient of a job (see taskIDs).
func (j *job) recipientAt(i int) string {
	if len(j.msg.Recipients) == 0 {
		return j.msg.Recipient
	}
	return j.msg.Recipients[i].Recipient
}

// waitSending waits for a batch's "sending" statuses (see send) before any
// other status of the job is written, so that one never lands over an
// outcome.
func (j *job) waitSending() {
	if j.sending != nil {
		<-j.sending
		j.sending = nil
	}
}
