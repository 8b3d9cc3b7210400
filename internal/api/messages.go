package api

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/logging"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/telemetry"
	"github.com/msgpulse/msgpulse/internal/template"
	"github.com/msgpulse/msgpulse/pkg/client"
)

// SendResult is the 202 answer's data.
type SendResult struct {
	TaskID      string     `json:"taskId"`
	Status      string     `json:"status"`
	ScheduledAt *time.Time `json:"scheduledAt,omitempty"`
}

func (s *Server) templateError(code, channel string, err error) *apiError {
	var mv *template.MissingVariableError
	switch {
	case errors.As(err, &mv):
		return badRequest("template %s needs variable %q", code, mv.Name)
	case errors.Is(err, template.ErrUnknownTemplate):
		return badRequest("unknown template %q (available: %s)", code, strings.Join(s.d.Templates.Codes(), ", "))
	case errors.Is(err, template.ErrUnsupportedChannel):
		return badRequest("template %s has no %s version", code, channel)
	case errors.Is(err, template.ErrUnsafeSubject):
		return badRequest("variables of template %s put a line break or control character into the email subject", code)
	}
	return badRequest("template %s: %v", code, err)
}

func (s *Server) sendMessage(c *echo.Context) error {
	var req SendRequest
	in, e := s.decodeBody(c, s.opts.BodyLimit, &req)
	if e != nil {
		return e
	}
	now := s.now()
	if e := req.validate(s.d.Templates.HasLocale, s.opts.CallbackHTTP, now); e != nil {
		return e
	}
	if e := s.checkCallbackKey(Caller(c), req.CallbackURL); e != nil {
		return e
	}
	if e := s.checkRobot(Caller(c), req.channel, req.Recipient); e != nil {
		return e
	}
	ctx := c.Request().Context()
	if e := s.checkContent(ctx, &req.Message); e != nil {
		return e
	}
	caller := Caller(c)
	if e := s.checkAccount(caller, &req.Message); e != nil {
		return e
	}
	// A retry of a failed attempt with the same Idempotency-Key publishes
	// under that attempt's task id, so that the claim sends it once.
	a, ok, answer := admitUnderKey(s, c, in, newTaskID(), func(taskID string) (admitted, error) {
		return s.admitAs(ctx, caller, &req.Message, req.Recipient, now, taskID, in.once(taskID, s.lease(1)))
	})
	if !ok {
		return answer
	}
	msg := s.message(&req.Message, caller.Tenant, now)
	msg.TaskID, msg.Recipient = a.taskID, a.recipient
	if err := s.durableAdmission(ctx, a); err != nil {
		s.undoAdmission(ctx, a)
		return notDurable(err)
	}
	if err := s.publish(ctx, req.channel, msg, req.delay); err != nil {
		s.undoAdmission(ctx, a)
		return publishFailure(err)
	}
	st, at := req.acceptedAs(now)
	return s.answer(c, in, a.res, http.StatusAccepted, "message "+string(st), SendResult{TaskID: a.taskID, Status: string(st), ScheduledAt: at})
}

// checkRobot: a WeCom robot belongs to the tenants WECOM_ROBOTS lists with
// it (none listed: every tenant). Another tenant's robot gets the answer of
// one that does not exist, so robot names cannot be probed.
func (s *Server) checkRobot(caller apikey.Key, channel, robot string) *apiError {
	if channel != chWeComRobot {
		return nil
	}
	if ts, ok := s.opts.Robots[robot]; ok && (len(ts) == 0 || slices.Contains(ts, caller.Tenant)) {
		return nil
	}
	return notFound("no WeCom robot %q for this key's tenant (robots and their tenants are WECOM_ROBOTS)", robot)
}

// checkContent checks what the message says, once for all its
// recipients: the template and its variables, the delay, the mentions, the
// callback's host.
func (s *Server) checkContent(ctx context.Context, req *Message) *apiError {
	// A code template sent as a message would carry a code the caller
	// chose, past the code limits, looking like a real one.
	if s.d.Templates.IsCode(req.TemplateCode) {
		return badRequest("template %s carries a verification code: request codes with POST /api/verification-codes, which generates, limits and checks them", req.TemplateCode)
	}
	if req.Media != nil {
		// The consumer fetches it through the same egress guard.
		if e := s.checkCallbackHost(ctx, req.Media.URL); e != nil {
			return badRequest("media url host refused: %s", strings.TrimPrefix(e.Msg, "callbackUrl host refused: "))
		}
	} else if err := s.d.Templates.Validate(req.TemplateCode, templateChannel(req.channel), req.Variables); err != nil {
		return s.templateError(req.TemplateCode, req.channel, err)
	}
	if slices.Contains(req.Mentions, "@all") {
		if f, _ := s.d.Templates.WeComFormat(req.TemplateCode); f != template.FormatText {
			return badRequest("template %s is %s: a WeCom robot mentions @all only in text messages", req.TemplateCode, f)
		}
	}
	if req.delay > 0 {
		if err := s.d.Delayed.Check(req.delay); err != nil {
			return badRequest("delay of %s not accepted: %v (DELAY_MAX)", describeDelay(req.delay), err)
		}
	}
	if req.CallbackURL != "" {
		return s.checkCallbackHost(ctx, req.CallbackURL)
	}
	return nil
}

// acceptedAs is the status an accepted message starts in, queued or
// scheduled, and when a scheduled one is due.
func (r *Message) acceptedAs(now time.Time) (status.State, *time.Time) {
	if r.delay <= 0 {
		return status.Queued, nil
	}
	at := now.Add(r.delay).UTC()
	return status.Scheduled, &at
}

// acceptedRecord is the status record a message starts with once admitted.
func acceptedRecord(ctx context.Context, caller apikey.Key, req *Message, recipient, taskID string, now time.Time) status.Record {
	rec := status.Record{TaskID: taskID, Channel: req.channel, Recipient: logging.Mask(recipient),
		Kind: string(envelope.Notification), Template: req.TemplateCode, Tenant: caller.Tenant, CreatedAt: now, UpdatedAt: now,
		Priority: string(req.level)}
	rec.Status, rec.ScheduledAt = req.acceptedAs(now)
	rec.TraceID = telemetry.TraceID(ctx)
	return rec
}

// message is the envelope of req without its task and recipient.
func (s *Server) message(req *Message, tenant string, now time.Time) *envelope.Message {
	msg := &envelope.Message{
		Version: envelope.SchemaVersion, Kind: envelope.Notification, Channel: topologyChannel(req.channel),
		Template: req.TemplateCode, Locale: req.Locale, Variables: req.Variables, CallbackURL: req.CallbackURL, Tenant: tenant, CreatedAt: now,
		Robot: req.channel == chWeComRobot, Mentions: req.Mentions, Account: req.account,
	}
	if req.Media != nil {
		msg.Media = &envelope.Media{Type: req.Media.Type, URL: req.Media.URL, Filename: req.Media.Filename}
	}
	if req.number != nil {
		msg.Priority = uint8(*req.number) //nolint:gosec // validated 0..9
	}
	// Always named: a message without a level is a code, and goes to the
	// codes' queue, where no notice may.
	msg.Level = string(req.level)
	// The deadline counts from when the message is due: a message
	// scheduled for tomorrow is not stale before it is sent.
	deadline := now.Add(req.delay + cmp.Or(req.ttl, s.opts.MessageMaxAge)).UTC()
	msg.Deadline = &deadline
	return msg
}

var taskIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// MessageView is GET /api/messages' data: the contract's Message, which
// pkg/client decodes, so the two cannot drift apart.
type MessageView = client.Message

func (s *Server) getMessage(c *echo.Context) error {
	id := c.Param("taskId")
	if id == "" {
		id = c.QueryParam("taskId")
	}
	if id == "" {
		return badRequest("taskId is required (GET /api/messages/{taskId} or ?taskId=)")
	}
	if !taskIDRE.MatchString(id) {
		return badRequest("taskId %q is not a valid task id", truncate(id, 64))
	}
	r, err := s.d.Status.Get(c.Request().Context(), id)
	if err != nil && !errors.Is(err, status.ErrNotFound) {
		return unavailable(err, "status is unavailable (Redis); try again")
	}
	// Another tenant's message gets the very answer of an unknown one.
	if err != nil || !Visible(c, r.Tenant) {
		return notFound("no message with taskId %s (records are kept for STATUS_TTL)", id)
	}
	return reply(c, http.StatusOK, "ok", messageView(r))
}

// messageView is what a caller may see of a record: never its callback URL
// or its recipient digest.
func messageView(r status.Record) MessageView {
	events := make([]client.ReceiptEvent, len(r.Events))
	for i, e := range r.Events {
		events[i] = client.ReceiptEvent(e)
	}
	return MessageView{
		TaskID: r.TaskID, Status: client.Status(r.Status), Channel: client.Channel(r.Channel), Recipient: r.Recipient,
		Attempts: r.Attempts, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, LastError: r.LastError, Kind: r.Kind,
		Template: r.Template, ScheduledAt: r.ScheduledAt, SentAt: r.SentAt, ErrorClass: r.ErrorClass, Reason: r.Reason,
		Provider: r.Provider, Priority: client.Level(r.Priority), ReceiptCode: r.ReceiptCode,
		ReceiptDetail: r.ReceiptDetail, ReceiptSource: r.ReceiptSource, DeliveredAt: r.DeliveredAt, Events: events,
	}
}
