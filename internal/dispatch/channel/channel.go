package channel

import (
	"context"
	"maps"

	"github.com/redis/go-redis/v9"

	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Channel sends the messages of one topology channel. The pipeline calls,
// for each run of a task: Admit before the claim, Send once the claim and
// the provider limits are taken, and Release when the task is over (also
// after a hand-off, once it is finished).
//
// Like a river worker, it never decides a delivery's fate: it returns
// nil (sent), or an error whose kind the pipeline's decision reads.
type Channel interface {
	// Provider names the provider in metrics and status records until one
	// answers a send (its receipt, or its error, may name another).
	Provider() string
	// Admit runs the channel's own checks before the claim (a WeCom
	// account resolved and up) and returns the limits the pipeline takes
	// between the claim and Send: rules, the provider's own (already
	// lowered for notices: ReserveForCodes), with the channel's added; nil
	// when the channel takes them itself at its send (a merged send).
	Admit(ctx context.Context, t *Task, rules []ratelimit.Rule) ([]ratelimit.Rule, error)
	// Send renders and sends t. call bounds the provider call
	// (SEND_TIMEOUT); ctx is the delivery's, for work that outlives Send
	// when t is handed off (see Task.Finish).
	Send(ctx, call context.Context, t *Task) (provider.Receipt, error)
	// Release gives back what Admit reserved for t, once t is over.
	Release(t *Task)
	// Holds is how many deliveries of level l's queue the channel may
	// hold past their handlers (its hand-offs): the queue's prefetch grows
	// by it. 0: none, and the pipeline never lets a task of l be handed
	// off.
	Holds(l topology.Level) int
	// Drain makes what is handed off finish as soon as it can: the
	// consumer is stopping.
	Drain()
}

// SentWriter is a channel that writes something of its own when a send
// succeeded (the SMS channel: the vendor's message id → the task, for
// delivery reports). The pipeline queues it on the round trip that marks
// the claim sent and records the status (markSent), so it costs no round
// trip of its own: QueueSent queues scripts on p and returns what reports
// their outcome once p ran, or nil when it queued none. A failure is
// logged, never decides: the message went out.
type SentWriter interface {
	QueueSent(ctx context.Context, p redis.Scripter, t *Task) func() error
}

// Task is one delivery's message as a channel sees it.
type Task struct {
	Msg   *envelope.Message
	Level topology.Level // of the queue it came from
	// Vars are the template's variables, the verification code among
	// them; set before Send.
	Vars map[string]string
	// Finish, when set, lets Send hand the task off (to a merge buffer, a
	// download pool): Send then returns ErrHandedOff, its worker takes
	// the next delivery, and whoever holds the task calls Finish once,
	// with the send's outcome. Unset, Send finishes the task where it is.
	Finish func(provider.Receipt, error)
	// State is the channel's own state of the task (a WeCom account, a
	// place in the media pool), kept across the pipeline's runs of it (a
	// Redis pause runs the task again).
	State any

	// rejected: recipients the provider (or the channel) refused for
	// good, by recipient, with the reason.
	rejected map[string]string
}

// Reject adds recipients refused for good, with the reason, to those
// already refused: they are failed, the others sent.
func (t *Task) Reject(why map[string]string) {
	if len(why) == 0 {
		return
	}
	if t.rejected == nil {
		t.rejected = make(map[string]string, len(why))
	}
	maps.Copy(t.rejected, why)
}

// Rejected are the recipients refused for good, by recipient.
func (t *Task) Rejected() map[string]string { return t.rejected }

// Urgent says whether a level's work goes out at once, never waiting for
// others: codes and urgent notices.
func Urgent(l topology.Level) bool { return l == topology.Code || l == topology.High }

// codeReserve is the share of every per-provider limit that only codes may
// use (seed 004's traffic shaper): notices, whatever their level, stop
// below it and wait (a snooze through the delay queues, never a failure),
// so when a provider is at its limit the next tokens go to codes.
const codeReserve = 0.2

// ReserveForCodes returns the rules a message of level l is checked
// against: for a notice the same keys, so that codes and notices count in
// the same log, with each window's limit lowered by the codes' reserve;
// for a code, rules themselves.
func ReserveForCodes(l topology.Level, rules []ratelimit.Rule) []ratelimit.Rule {
	if l == topology.Code || len(rules) == 0 {
		return rules
	}
	return ratelimit.Reserve(rules, codeReserve, "codes")
}
