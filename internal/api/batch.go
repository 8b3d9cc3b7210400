package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v5"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/pkg/client"
)

// MaxBatchRecipients is the most recipients of one batch: one WeCom
// message/send call.
const MaxBatchRecipients = envelope.MaxRecipients

// BatchRequest is the body of POST /api/messages/batch: a send request
// with recipients instead of a recipient.
type BatchRequest struct {
	Message
	Recipients []string `json:"recipients"`
}

// The batch's answers are the client's types (pkg/client is the contract's
// types in Go): what the API writes is, by construction, what a Go caller
// reads.
type (
	// BatchAccepted is one accepted recipient and its task.
	BatchAccepted = client.BatchAccepted
	// BatchRejected is one rejected recipient, with the status code and
	// message a single send to it would have got.
	BatchRejected = client.BatchRejected
	// BatchResult is the 202 answer's data.
	BatchResult = client.BatchResult
)

// batchBodyLimit: a batch carries up to 1000 recipients, more than
// BODY_LIMIT's default allows for single requests. It stays well above
// what a batch of small variables needs, so that a body whose variables
// would be copied too many times is answered by BATCH_MAX_BYTES, which
// says why, rather than by the body limit.
func (s *Server) batchBodyLimit() int64 { return max(s.opts.BodyLimit, 512<<10) }

// DefaultBatchMaxBytes is BATCH_MAX_BYTES' default.
const DefaultBatchMaxBytes = 8 << 20

// batchBytes is what a batch would put on the broker, computed before
// anything is written: a mail or SMS batch publishes one envelope per
// recipient, each with its own copy of the variables (so a 130 KiB body
// can become 128 MiB of messages), counted as the recipients times the
// envelope of the longest one; a WeCom application batch is one envelope
// listing every recipient. Recipients that will be refused count too: the
// bound holds before they are known.
func (s *Server) batchBytes(req *Message, tenant string, recipients []string, now time.Time) (int64, error) {
	msg := s.message(req, tenant, now)
	id := newTaskID() // as long as the real ids
	msg.TaskID, msg.BatchID = id, id
	if req.channel == chWeCom {
		for _, r := range recipients {
			msg.Recipients = append(msg.Recipients, envelope.Recipient{TaskID: id, Recipient: r})
		}
		msg.Recipient = ""
		b, err := json.Marshal(msg)
		return int64(len(b)), err
	}
	for _, r := range recipients {
		if len(r) > len(msg.Recipient) {
			msg.Recipient = r
		}
	}
	b, err := json.Marshal(msg)
	return int64(len(b)) * int64(len(recipients)), err
}

func (s *Server) sendBatch(c *echo.Context) error {
	var b BatchRequest
	in, e := s.decodeBody(c, s.batchBodyLimit(), &b)
	if e != nil {
		return e
	}
	now := s.now()
	req := &b.Message
	if e := req.validateCommon(s.d.Templates.HasLocale, s.opts.CallbackHTTP, now); e != nil {
		return e
	}
	if e := s.checkCallbackKey(Caller(c), req.CallbackURL); e != nil {
		return e
	}
	if n := len(b.Recipients); n < 1 || n > MaxBatchRecipients {
		return badRequest("recipients: give 1 to %d, not %d", MaxBatchRecipients, n)
	}
	ctx := c.Request().Context()
	if e := s.checkContent(ctx, req); e != nil {
		return e
	}
	caller := Caller(c)
	if e := s.checkAccount(caller, req); e != nil {
		return e
	}
	size, err := s.batchBytes(req, caller.Tenant, b.Recipients, now)
	if err != nil {
		return internal(err)
	}
	if size > s.opts.BatchMaxBytes {
		// Before any recipient is admitted: nothing is counted, written or
		// published.
		return &apiError{Status: http.StatusRequestEntityTooLarge, Msg: fmt.Sprintf(
			"batch would put %d bytes on the broker (each of its %d recipients gets its own copy of the variables), over BATCH_MAX_BYTES (%d): send fewer recipients per batch or smaller variables",
			size, len(b.Recipients), s.opts.BatchMaxBytes)}
	}
	// With a key, task ids derive from the batch id, so that a retry of a
	// failed attempt (whose entry kept its batchId) publishes the very
	// tasks that attempt may have published.
	firstID := newTaskID()
	ab, ok, answer := admitUnderKey(s, c, in, firstID, func(batchID string) (admittedBatch, error) {
		return s.admitRecipients(ctx, caller, req, b.Recipients, in, batchID, now)
	})
	if !ok {
		return answer
	}
	if len(ab.accepted) == 0 {
		return ab.first // what a single send would have got
	}
	batchID, accepted, held, takeover := ab.id, ab.accepted, ab.held, ab.id != firstID
	out := BatchResult{BatchID: batchID, Accepted: []BatchAccepted{}, Rejected: ab.rejected}
	ids := make([]string, len(accepted))
	var records []status.Record
	for i, a := range accepted {
		ids[i] = a.taskID
		out.Accepted = append(out.Accepted, BatchAccepted{Recipient: a.recipient, TaskID: a.taskID})
		if a.record != nil {
			records = append(records, *a.record)
		}
	}
	if err := s.d.Status.CreateBatch(ctx, out.BatchID, ids, records...); err != nil {
		s.rollbackBatch(ctx, failedBatch{id: batchID, accepted: accepted, held: held})
		return unavailable(err, "status is unavailable (Redis); nothing was kept, try again")
	}
	if takeover && s.d.Claims != nil {
		// The failed attempt withdrew what it had published; this attempt
		// publishes the same tasks, which must not meet those marks.
		if err := s.d.Claims.Unwithdraw(ctx, s.batchClaimKeys(req.channel, batchID, accepted)); err != nil {
			s.rollbackBatch(ctx, failedBatch{id: batchID, listed: true, accepted: accepted, held: held})
			return unavailable(err, "claims are unavailable (Redis); nothing was sent, retry with the same %s", HeaderIdempotencyKey)
		}
	}
	// Every record, the task list, the Idempotency-Key entry and (after a
	// takeover) the cleared withdrawals, durable before anything is
	// published: on a Redis Cluster, each of their masters is fenced.
	keys := []string{s.d.Status.BatchKey(out.BatchID)}
	if held != nil {
		keys = append(keys, held.OnceKey)
	}
	for _, id := range ids {
		keys = append(keys, s.d.Status.Key(id))
	}
	durErr := s.durable(ctx, keys...)
	if durErr == nil && takeover && s.d.Claims != nil {
		durErr = s.durableDeleted(ctx, s.batchClaimKeys(req.channel, batchID, accepted)...)
	}
	if err := durErr; err != nil {
		s.rollbackBatch(ctx, failedBatch{id: batchID, listed: true, accepted: accepted, held: held})
		return notDurable(err)
	}
	if published, err := s.publishBatch(ctx, req, caller.Tenant, out.BatchID, accepted, now); err != nil {
		s.rollbackBatch(ctx, failedBatch{id: batchID, listed: true, accepted: accepted, published: published, held: held})
		return publishFailure(err)
	}
	st, at := req.acceptedAs(now)
	out.Status, out.ScheduledAt = client.Status(st), at
	return s.answer(c, in, held, http.StatusAccepted, "batch "+string(st), out)
}

// admittedBatch is what frequency control made of a batch's recipients.
type admittedBatch struct {
	id       string // the batch id, under which its Idempotency-Key entry is held
	accepted []admitted
	rejected []BatchRejected
	first    *apiError // the first rejection
	// held is the admission that reserved the Idempotency-Key's entry:
	// the first admitted one carries it, so a refused recipient reserves
	// nothing, and a batch that admits none keeps no entry.
	held *ratelimit.Reservation
}

// batchEntry is one recipient of a batch, in order: rejected (e),
// admitted (a), or waiting for frequency control (neither).
type batchEntry struct {
	recipient string
	e         *apiError
	a         *admitted
}

// admitRecipients runs a batch's recipients through frequency control
// under batchID. When another request holds the batch's Idempotency-Key,
// the error is the *ratelimit.OnceError and nothing of the batch was
// written; any other error is the answer for the whole batch, and what
// could have landed is being undone.
func (s *Server) admitRecipients(ctx context.Context, caller apikey.Key, req *Message, recipients []string, in *idem, batchID string, now time.Time) (admittedBatch, error) {
	taskID := func(recipient string) string {
		if in == nil {
			return newTaskID()
		}
		return derivedTaskID(batchID, recipient)
	}
	entries := s.batchEntries(caller, req, recipients)
	admittedSoFar := func() []admitted {
		var as []admitted
		for _, en := range entries {
			if en.a != nil {
				as = append(as, *en.a)
			}
		}
		return as
	}
	// Until the Idempotency-Key's entry is held, recipients go one by one:
	// the first admitted reserves it, so that a refused recipient reserves
	// nothing. The rest share every rule with each other (per key, per
	// tenant, per channel) and go together (admitBulk).
	var (
		held *ratelimit.Reservation
		rest []int
	)
	for i := range entries {
		en := &entries[i]
		if en.e != nil {
			continue
		}
		var once *ratelimit.Once
		if held == nil {
			once = in.once(batchID, s.lease(len(recipients)))
		}
		if once == nil {
			rest = append(rest, i)
			continue
		}
		a, err := s.admitAs(ctx, caller, req, en.recipient, now, taskID(en.recipient), once)
		if onceOf(err) != nil {
			// Nothing of this attempt is admitted yet: the entry is
			// reserved with the first admission.
			return admittedBatch{}, err
		}
		if err != nil {
			e := asAPIError(err)
			if e.Status == http.StatusServiceUnavailable {
				// Redis is not answering: the next recipients would each
				// wait for it too. Nothing of this batch is kept.
				s.rollbackBatch(ctx, failedBatch{id: batchID, accepted: admittedSoFar(), held: held})
				return admittedBatch{}, e
			}
			en.e = e
			continue
		}
		held = a.res
		en.a = &a
	}
	if len(rest) > 0 {
		recipients, ids := make([]string, len(rest)), make([]string, len(rest))
		for j, i := range rest {
			recipients[j] = entries[i].recipient
			ids[j] = taskID(recipients[j])
		}
		as, suppressed, refused, fatal := s.admitBulk(ctx, caller, req, recipients, ids, now)
		if fatal != nil {
			s.rollbackBatch(ctx, failedBatch{id: batchID, accepted: admittedSoFar(), held: held})
			return admittedBatch{}, fatal
		}
		next := 0
		for j, i := range rest {
			switch {
			case suppressed[j] != nil:
				entries[i].e = suppressed[j]
			case next < len(as):
				entries[i].a = &as[next]
				next++
			default:
				entries[i].e = refused
			}
		}
	}
	ab := admittedBatch{id: batchID, rejected: []BatchRejected{}, held: held}
	for _, en := range entries {
		if en.e == nil {
			ab.accepted = append(ab.accepted, *en.a)
			continue
		}
		ab.rejected = append(ab.rejected, BatchRejected{Recipient: en.recipient, Code: en.e.Status, Msg: en.e.Msg})
		if ab.first == nil {
			ab.first = en.e
		}
	}
	return ab, nil
}

// batchEntries are a batch's recipients, normalised, with the ones a
// single send would refuse before frequency control already rejected:
// invalid, listed twice, or another tenant's robot.
func (s *Server) batchEntries(caller apikey.Key, req *Message, recipients []string) []batchEntry {
	entries := make([]batchEntry, 0, len(recipients))
	seen := map[string]bool{}
	for _, r := range recipients {
		norm, e := normalizeRecipient(req.channel, r)
		switch {
		case e != nil:
			entries = append(entries, batchEntry{recipient: truncate(r, 254), e: e})
			continue
		case seen[norm]:
			entries = append(entries, batchEntry{recipient: r, e: badRequest("recipient %s is listed twice in this batch", norm)})
			continue
		}
		seen[norm] = true
		entries = append(entries, batchEntry{recipient: norm, e: s.checkRobot(caller, req.channel, norm)})
	}
	return entries
}

// batchClaimKeys are the claim keys of a batch's messages: one for a WeCom
// application batch, one per task otherwise (as publishBatch sends them).
func (s *Server) batchClaimKeys(channel, batchID string, accepted []admitted) []string {
	ch := topologyChannel(channel)
	if channel == chWeCom {
		return s.claimKeys(ch, batchID)
	}
	var keys []string
	for _, a := range accepted {
		keys = append(keys, s.claimKeys(ch, a.taskID)...)
	}
	return keys
}

// publishBatch publishes a batch and waits for the confirms. A WeCom
// application batch is one message (one message/send call for all its
// recipients); every other channel gets one message per recipient,
// published batchPublishers at a time. On a failure it returns the claim
// keys of every message it tried to publish: a publish that failed on its
// confirm may still have reached the queue, and is withdrawn too.
func (s *Server) publishBatch(ctx context.Context, req *Message, tenant, batchID string, accepted []admitted, now time.Time) ([]string, error) {
	ch := topologyChannel(req.channel)
	if req.channel == chWeCom {
		msg := s.message(req, tenant, now)
		msg.TaskID, msg.BatchID = batchID, batchID
		for _, a := range accepted {
			msg.Recipients = append(msg.Recipients, envelope.Recipient{TaskID: a.taskID, Recipient: a.recipient})
		}
		if err := s.publish(ctx, req.channel, msg, req.delay); err != nil {
			return s.claimKeys(ch, batchID), err
		}
		return nil, nil
	}
	var (
		mu        sync.Mutex
		attempted []string
		first     error
		wg        sync.WaitGroup
		slots     = make(chan struct{}, batchPublishers)
	)
	failed := func() bool { mu.Lock(); defer mu.Unlock(); return first != nil }
	for _, a := range accepted {
		slots <- struct{}{}
		if failed() {
			// Start no more; the ones in flight finish (within
			// PUBLISH_TIMEOUT), so what reached the queue is known.
			<-slots
			break
		}
		mu.Lock()
		attempted = append(attempted, s.claimKeys(ch, a.taskID)...)
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			msg := s.message(req, tenant, now)
			msg.TaskID, msg.Recipient, msg.BatchID = a.taskID, a.recipient, batchID
			if err := s.publish(ctx, req.channel, msg, req.delay); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return attempted, first
	}
	return nil, nil
}

// batchPublishers is how many messages of a mail or SMS batch wait for
// their confirms at once.
const batchPublishers = 32

func (s *Server) claimKeys(channel, taskID string) []string {
	if s.d.Claims == nil {
		return nil
	}
	return []string{s.d.Claims.TaskKey(channel, taskID)}
}

// failedBatch is what a batch that failed had written, to undo.
type failedBatch struct {
	id       string // the batch id, under which its Idempotency-Key entry is held
	listed   bool   // its task list was written
	accepted []admitted
	// published are the claim keys of the messages the broker may have
	// queued, to withdraw so that consumers ack them unsent.
	published []string
	// held is the admission that reserved the Idempotency-Key's entry
	// (nil: none), released with the batch id kept for the retry.
	held *ratelimit.Reservation
}

// rollbackBatch undoes every accepted recipient (status record and
// counted limits), the batch's task list and its Idempotency-Key entry,
// and withdraws the messages the broker had already confirmed: all in one
// round trip (undoAll), waited for at most REDIS_TIMEOUT (bounded), so
// that the 503 of a batch of 1,000 comes within one REDIS_TIMEOUT of the
// failure, not 1,000 of them, when Redis is away (issue 38).
func (s *Server) rollbackBatch(ctx context.Context, b failedBatch) {
	// Recipients admitted together share one reservation (admitBulk):
	// it is undone once, with all of them.
	undone := map[*ratelimit.Reservation]bool{}
	us := make([]undo, 0, len(b.accepted)+1)
	for _, a := range b.accepted {
		u := undo{taskID: a.taskID}
		if !undone[a.res] {
			undone[a.res], u.reservation = true, a.res
		}
		us = append(us, u)
	}
	if b.held != nil && b.held.OnceKey != "" {
		us = append(us, undo{once: b.held.OnceKey, onceIDs: b.id})
	}
	list := ""
	if b.listed {
		list = b.id
	}
	undo := func() {
		werr, err := s.undoAll(ctx, us, list, b.published)
		if werr != nil {
			s.log.Error("could not withdraw the published part of a failed batch; it may be sent", zap.String("batch_id", b.id), zap.Error(werr))
		}
		if err != nil {
			s.rollbackFailed(ctx, zap.String("batch_id", b.id), err)
		}
	}
	if len(b.published) > 0 {
		// The 503 says nothing was kept: it waits for the withdrawal,
		// which is what keeps the consumers from sending.
		undo()
		return
	}
	s.bounded(undo)
}

func (s *Server) getBatch(c *echo.Context) error {
	id := c.Param("batchId")
	if !taskIDRE.MatchString(id) {
		return badRequest("batchId %q is not a valid batch id", truncate(id, 64))
	}
	ctx := c.Request().Context()
	b, err := s.d.Status.GetBatch(ctx, id)
	if err != nil && !errors.Is(err, status.ErrNotFound) {
		return unavailable(err, "status is unavailable (Redis); try again")
	}
	// A batch belongs to the tenant of its tasks; another tenant's gets
	// the very answer of an unknown one.
	if err == nil && (b.Ownerless || !Visible(c, b.Tenant)) {
		err = status.ErrNotFound
	}
	if err != nil {
		return notFound("no batch with batchId %s (batches are kept for STATUS_TTL)", id)
	}
	counts := map[client.Status]int{}
	for _, st := range status.States {
		counts[client.Status(st)] = b.Counts[st]
	}
	return reply(c, http.StatusOK, "ok", client.Batch{BatchID: b.ID, Total: len(b.TaskIDs), Counts: counts, TaskIDs: b.TaskIDs})
}
