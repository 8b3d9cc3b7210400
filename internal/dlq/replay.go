package dlq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/redact"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/telemetry"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Results of one message in a replay.
const (
	Replayed    = "replayed"
	WouldReplay = "would-replay" // --dry-run
	Skipped     = "skipped"
	Failed      = "failed"
)

// Outcome is what happened to one selected message.
type Outcome struct {
	ID      string `json:"id"`
	Result  string `json:"result"`
	Reason  string `json:"reason"`
	Channel string `json:"channel,omitempty"`
	Why     string `json:"why,omitempty"` // for skipped and failed
}

// ReplayReport is replay's result (its --json document).
type ReplayReport struct {
	Queue       string `json:"queue"`
	DryRun      bool   `json:"dryRun"`
	Replayed    int    `json:"replayed"`
	WouldReplay int    `json:"wouldReplay,omitempty"`
	Skipped     int    `json:"skipped"`
	// SkippedDeadline counts the skipped messages past their deadline.
	SkippedDeadline int  `json:"skippedDeadline"`
	Failed          int  `json:"failed"`
	Interrupted     bool `json:"interrupted,omitempty"`
	// Read is how many messages were looked at, of Depth at the start.
	Read     int       `json:"read"`
	Depth    int       `json:"depth"`
	Messages []Outcome `json:"messages"`
}

// stripOnReplay: headers that describe the message's past deaths and
// deliveries, not the message. Left on, x-death would make the next death
// look like the old one, and CC would route a copy elsewhere.
func stripOnReplay(k string) bool {
	switch k {
	case envelope.HeaderXDeath, envelope.HeaderCC, "BCC", envelope.HeaderDeliveryCount:
		return true
	}
	return strings.HasPrefix(k, envelope.HeaderFirstDeathPfx) || strings.HasPrefix(k, envelope.HeaderLastDeathPfx)
}

// republishing is the message to publish for d: the same body and
// properties (MessageId above all: it is the taskId the consumer's claims
// and the status record are keyed by), death headers stripped, the replay
// counted.
func republishing(d *amqp.Delivery) amqp.Publishing {
	h := amqp.Table{}
	for k, v := range d.Headers {
		if !stripOnReplay(k) {
			h[k] = v
		}
	}
	n, _ := envelope.HeaderInt(d.Headers, envelope.HeaderReplays)
	h[envelope.HeaderReplays] = int32(n + 1)
	return amqp.Publishing{
		Headers: h, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding, DeliveryMode: d.DeliveryMode,
		Priority: d.Priority, CorrelationId: d.CorrelationId, ReplyTo: d.ReplyTo, Expiration: d.Expiration,
		MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type, UserId: d.UserId, AppId: d.AppId, Body: d.Body,
	}
}

// publisher opens a confirming publisher on a connection of its own, so a
// broker that blocks publishers (resource alarm) does not also stall the
// reading channel's acks.
func (t *Tool) publisher(ctx context.Context) (*broker.Publisher, func(), error) {
	sess, err := broker.NewSession(broker.Config{URL: t.cfg.AMQPURL, ConnectionName: "msgpulse-dlq-replay", Logger: t.log.Named("broker")})
	if err != nil {
		return nil, nil, err
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	go sess.Run(runCtx)
	stopSession := func() { stop(); <-sess.Done() }
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := sess.Conn(wctx); err != nil {
		stopSession()
		return nil, nil, fmt.Errorf("connect to %s to publish: %w", redact.Passwords(t.cfg.AMQPURL), err)
	}
	pub, err := broker.NewPublisher(broker.PublisherConfig{Session: sess, Channels: 1, ConfirmTimeout: t.cfg.ConfirmTimeout, Logger: t.log})
	if err != nil {
		stopSession()
		return nil, nil, err
	}
	return pub, func() { pub.Close(); stopSession() }, nil
}

// replay republishes the selected messages one at a time: publish with
// mandatory routing, wait for the broker's confirm, and only then ack the
// dead letter. Whatever stops it (a failed publish, SIGINT, a crash) leaves
// the message it was on in the DLQ; the worst case is a message that was
// republished and is still in the DLQ, i.e. a duplicate, never a loss.
func (c *cli) replay(ctx context.Context, t *Tool, queue string, o opts) (int, error) {
	rep, err := t.Replay(ctx, queue, o.Options)
	if rep != nil {
		if o.json {
			if jerr := writeJSON(c.stdout, rep); jerr != nil {
				err = errors.Join(err, jerr)
			}
		} else {
			c.printReplay(rep)
		}
	}
	switch {
	case err != nil:
		return ExitError, err
	case rep.Interrupted:
		return ExitError, errors.New("interrupted: the messages not replayed are still in " + queue)
	case rep.Failed > 0:
		return ExitError, fmt.Errorf("%d message(s) could not be replayed; they are still in %s", rep.Failed, queue)
	}
	seen := map[string]bool{}
	for _, m := range rep.Messages {
		seen[m.ID] = true
	}
	if ids := missing(o.IDs, seen); len(ids) > 0 && (o.Limit == 0 || rep.Replayed+rep.WouldReplay < o.Limit) {
		return ExitError, fmt.Errorf("not found in %s: %s", queue, strings.Join(ids, ", "))
	}
	return ExitOK, nil
}

// Replay republishes the selected messages one at a time, at most o.Rate
// per second: publish with mandatory routing, wait for the broker's
// confirm, and only then ack the dead letter. It skips messages past their
// deadline and malformed ones unless o.Force. The report says what
// happened to each; a nil report comes with an error that stopped it
// before it read anything.
func (t *Tool) Replay(ctx context.Context, queue string, o Options) (*ReplayReport, error) {
	rep := &ReplayReport{Queue: queue, DryRun: o.DryRun, Messages: []Outcome{}}
	var pub *broker.Publisher
	if !o.DryRun {
		p, closePub, err := t.publisher(ctx)
		if err != nil {
			return nil, err
		}
		defer closePub()
		pub = p
	}
	// Burst 1: the first replay goes at once, then one per 1/rate.
	limiter := rate.NewLimiter(rate.Inf, 1)
	if o.Rate > 0 {
		limiter = rate.NewLimiter(rate.Limit(o.Rate), 1)
	}
	sel := t.selector(o)
	// A publish that has started is allowed to finish (bounded by the
	// confirm timeout) even after SIGINT: abandoning it would leave a copy
	// on its way whose original we could no longer ack.
	pubCtx := context.WithoutCancel(ctx)
	// decide notes a selected message that is skipped or, in a dry run,
	// would be replayed, and says whether replay is done with it.
	decide := func(in inspected, note func(result, why string)) bool {
		switch {
		case in.Channel == "":
			rep.Skipped++
			note(Skipped, "no channel to replay to: it died in "+dash(in.DeathQueue)+" and its body names none")
		case !o.Force && in.Expired(t.now()):
			rep.Skipped++
			rep.SkippedDeadline++
			note(Skipped, "its deadline "+when(in.Deadline)+" has passed (--force replays it; the consumer will dead-letter it again as deadline)")
		case !o.Force && in.Reason == status.ReasonMalformed:
			rep.Skipped++
			note(Skipped, "malformed: the consumer would reject it again (--force replays it)")
		case o.DryRun:
			rep.WouldReplay++
			note(WouldReplay, "")
		default:
			return false
		}
		return true
	}
	if o.DryRun {
		// A dry run is a read: it goes to the log (see readLog), so it
		// spends no delivery attempt.
		v, err := t.readMatching(ctx, queue, sel, &rep.Read, func(in inspected, _ *amqp.Delivery) error {
			out := Outcome{ID: in.ID, Reason: in.Reason, Channel: in.Channel}
			decide(in, func(result, why string) {
				out.Result, out.Why = result, why
				rep.Messages = append(rep.Messages, out)
			})
			if o.Limit > 0 && rep.WouldReplay >= o.Limit {
				return errStop
			}
			return nil
		})
		rep.Depth = v.Depth
		if err != nil && rep.Read == 0 {
			return nil, err
		}
		return rep, err
	}
	passer, closePass, err := t.passer(ctx, queue, pub)
	if err != nil {
		return nil, err
	}
	defer closePass()
	r, err := scan(ctx, t.conn, queue, t.cfg.ScanMax, nil, func(r *reader, del *amqp.Delivery) (bool, error) {
		in := t.x.inspect(ctx, queue, del)
		if !sel.match(&in.Entry, taskID(in)) {
			return false, passer(r, del)
		}
		out := Outcome{ID: in.ID, Reason: in.Reason, Channel: in.Channel}
		note := func(result, why string) {
			out.Result, out.Why = result, why
			rep.Messages = append(rep.Messages, out)
		}
		if decide(in, note) {
			return false, passer(r, del)
		}
		if err := limiter.Wait(ctx); err != nil {
			return true, nil //nolint:nilerr // interrupted while waiting: this one stays in the DLQ, the replay stops cleanly
		}
		ct, err := t.model.Channel(in.Channel)
		if err != nil {
			rep.Failed++
			note(Failed, err.Error())
			return false, nil
		}
		key := ct.Level(topology.Level(in.Level)).RoutingKey // back to its level
		if err := pub.Publish(pubCtx, ct.Exchange, key, republishing(del)); err != nil {
			rep.Failed++
			note(Failed, err.Error())
			t.log.Warn("replay failed; the message stays in the DLQ", zap.String("task_id", in.ID), telemetry.HeaderField(del.Headers), zap.String("queue", queue), zap.Error(err))
			// Without a broker every further publish fails the same way.
			stop := errors.Is(err, broker.ErrUnavailable) || errors.Is(err, broker.ErrBlocked)
			return stop, nil
		}
		if t.afterConfirm != nil {
			if err := t.afterConfirm(rep.Replayed + 1); err != nil {
				rep.Failed++
				note(Failed, "republished but not removed from the DLQ: "+err.Error())
				return true, err
			}
		}
		if err := r.ack(del.DeliveryTag); err != nil {
			// The copy is on its way; the original stays: a duplicate.
			rep.Replayed++
			note(Replayed, "republished, but still in the DLQ too (ack failed): "+err.Error())
			return true, err
		}
		rep.Replayed++
		note(Replayed, "")
		t.log.Info("replayed", zap.String("task_id", in.ID), telemetry.HeaderField(del.Headers), zap.String("queue", queue), zap.String("reason", in.Reason),
			zap.String("exchange", ct.Exchange), t.who)
		return o.Limit > 0 && rep.Replayed >= o.Limit, nil
	})
	if r != nil {
		rep.Read, rep.Depth = r.read(), r.depth
	}
	// What was acked is gone from the DLQ but not from its log: record it
	// so that list, show and stats leave it out.
	t.forget(ctx, queue, r)
	if ctx.Err() != nil {
		rep.Interrupted = true
		if errors.Is(err, ctx.Err()) {
			err = nil // said by Interrupted; a release error would still be joined in
		}
	}
	if err != nil && r == nil {
		return nil, err
	}
	return rep, err
}

func (c *cli) printReplay(rep *ReplayReport) {
	tw := table(c.stdout)
	if len(rep.Messages) > 0 {
		fmt.Fprintln(tw, "ID\tRESULT\tREASON\tCHANNEL\tWHY")
		for _, m := range rep.Messages {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", dash(m.ID), m.Result, m.Reason, dash(m.Channel), m.Why)
		}
		_ = tw.Flush()
	}
	if rep.DryRun {
		fmt.Fprintf(c.stdout, "dry run on %s: would replay %d, skip %d (%d past their deadline); nothing was changed\n",
			rep.Queue, rep.WouldReplay, rep.Skipped, rep.SkippedDeadline)
		return
	}
	fmt.Fprintf(c.stdout, "%s: replayed %d, skipped %d (%d past their deadline), failed %d; read %d of %d\n",
		rep.Queue, rep.Replayed, rep.Skipped, rep.SkippedDeadline, rep.Failed, rep.Read, rep.Depth)
}
