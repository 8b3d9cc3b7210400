package dlq

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/seal"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// SealedMask replaces the sealed code wherever a body is shown.
const SealedMask = "[sealed: dlq show --reveal opens it]"

func (c *cli) stats(ctx context.Context, t *Tool, queues []string, o opts) (int, error) {
	reps, err := t.Stats(ctx, queues, o.Limit)
	if err != nil {
		return ExitError, err
	}
	if o.json {
		return ExitOK, writeJSON(c.stdout, map[string]any{"queues": reps})
	}
	tw := table(c.stdout)
	fmt.Fprintln(tw, "QUEUE\tCHANNEL\tTOTAL\tOLDEST DEATH\tNEWEST DEATH\tBY REASON\tBY BROKER REASON")
	for _, r := range reps {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.Queue, dash(r.Channel), r.Total, when(r.Oldest), when(r.Newest),
			dash(reasonCounts(r.ByReason)), dash(reasonCounts(r.ByBrokerReason)))
	}
	return ExitOK, tw.Flush()
}

// Listing is what List read.
type Listing struct {
	Entries []Entry
	Read    int // messages looked at
	Depth   int // of the queue when reading started
	// Unlogged is how many of the queue's messages its log does not have
	// (older than DLQ_LOG_MAX_AGE, or dead before the log existed): they
	// are counted in Depth but cannot be listed.
	Unlogged int
}

// More reports whether List stopped at its limit before the end of the
// queue.
func (l Listing) More(limit int) bool {
	return limit > 0 && len(l.Entries) >= limit && l.Read < l.Depth
}

// List returns the dead letters in queue that match o (IDs, Reason,
// Since; at most Limit), in queue order. It reads the queue's log, not the
// queue (see readLog), so listing spends no delivery attempt. each, if not
// nil, sees each entry as it is read.
func (t *Tool) List(ctx context.Context, queue string, o Options, each func(Entry) error) (Listing, error) {
	sel := t.selector(o)
	sel.all = true
	var l Listing
	v, err := t.readMatching(ctx, queue, sel, &l.Read, func(in inspected, _ *amqp.Delivery) error {
		if each != nil {
			if err := each(in.Entry); err != nil {
				return err
			}
		}
		l.Entries = append(l.Entries, in.Entry)
		if o.Limit > 0 && len(l.Entries) >= o.Limit {
			return errStop
		}
		return nil
	})
	l.Depth, l.Unlogged = v.Depth, v.Unlogged
	return l, err
}

func (c *cli) list(ctx context.Context, t *Tool, queue string, o opts) (int, error) {
	var each func(Entry) error
	if o.json {
		enc := json.NewEncoder(c.stdout)
		each = func(e Entry) error { return enc.Encode(e) } // streamed, so a long listing shows up as it is read
	}
	l, err := t.List(ctx, queue, o.Options, each)
	if err != nil {
		return ExitError, err
	}
	if o.json {
		return ExitOK, nil
	}
	now := c.now()
	tw := table(c.stdout)
	fmt.Fprintln(tw, "ID\tCHANNEL\tRECIPIENT\tREASON\tBROKER REASON\tDIED IN\tDIED AT\tDEATHS\tREPLAYS\tATTEMPTS\tAGE\tERROR")
	for _, e := range l.Entries {
		attempts := "-"
		if e.Attempts != nil {
			attempts = fmt.Sprint(*e.Attempts)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", dash(e.ID), dash(e.Channel), dash(e.Recipient), e.Reason,
			dash(e.BrokerReason), dash(e.DeathQueue), when(e.DeathTime), e.Deaths, e.Replays, attempts, age(e.Age(now)), dash(ErrorText(e)))
	}
	if err := tw.Flush(); err != nil {
		return ExitError, err
	}
	more := ""
	if l.More(o.Limit) {
		more = fmt.Sprintf(" (stopped at --limit %d after reading %d)", o.Limit, l.Read)
	}
	fmt.Fprintf(c.stdout, "%d shown of %d in %s%s\n", len(l.Entries), l.Depth, queue, more)
	if l.Unlogged > 0 {
		fmt.Fprintf(c.stdout, "%d of them are not in the log %s (older than DLQ_LOG_MAX_AGE, or dead before it existed) and cannot be listed; replay and purge still reach them\n",
			l.Unlogged, topology.DeadLetterLogName(queue))
	}
	return ExitOK, nil
}

// ErrorText is the consumer's error for a listing, kept to one short line.
func ErrorText(e Entry) string {
	s := e.LastError
	if e.ErrorClass != "" {
		s = e.ErrorClass + ": " + s
	}
	if s == "" {
		s = e.Malformed
	}
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 70 {
		s = string(r[:69]) + "…"
	}
	return s
}

// Shown is one message as show prints it.
type Shown struct {
	Entry      Entry          `json:"entry"`
	Properties properties     `json:"properties"`
	Headers    map[string]any `json:"headers"`
	Deaths     []Death        `json:"deaths"`
	Body       any            `json:"body"`                 // JSON with the code masked, or the raw text
	BodyBase64 string         `json:"bodyBase64,omitempty"` // when the body is not JSON
	Code       string         `json:"code,omitempty"`       // only with --reveal
}

// ErrNotFound: no message with that id in the queue.
var ErrNotFound = errors.New("no such message")

// Show returns every message in queue with this id (a replayed duplicate
// makes more than one), read from the queue's log (see readLog). reveal opens the sealed
// code (needs CODE_SECRET) and logs who did; the console never asks it.
func (t *Tool) Show(ctx context.Context, queue, id string, reveal bool) ([]Shown, error) {
	sel := t.selector(Options{IDs: []string{id}})
	var found []Shown
	var msgs []*envelope.Message
	_, err := t.readMatching(ctx, queue, sel, nil, func(in inspected, del *amqp.Delivery) error {
		h, _ := jsonValue(del.Headers).(map[string]any)
		s := Shown{Entry: in.Entry, Properties: propertiesOf(del), Headers: h, Deaths: envelope.Deaths(del.Headers)}
		s.Body, s.BodyBase64 = maskedBody(del.Body)
		found = append(found, s)
		msgs = append(msgs, in.msg)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("%w: no message with id %s in %s", ErrNotFound, id, queue)
	}
	if !reveal {
		return found, nil
	}
	keys, err := seal.New(t.cfg.CodeSecret)
	if err != nil {
		return nil, fmt.Errorf("CODE_SECRET: %w", err)
	}
	for i := range found {
		m := msgs[i]
		if m == nil || m.SealedCode == "" {
			t.warn(fmt.Sprintf("message %s carries no sealed code", found[i].Entry.ID))
			continue
		}
		code, err := keys.Open(m.SealedCode, m.TaskID)
		if err != nil {
			hint := ""
			if t.cfg.CodeSecretIsDev {
				hint = " (CODE_SECRET is the development default; set the API's)"
			}
			return nil, fmt.Errorf("message %s: %w%s", m.TaskID, err, hint)
		}
		// Who looked, at what, from where; never the code itself.
		t.log.Warn("verification code revealed", zap.String("task_id", m.TaskID), zap.String("queue", queue),
			t.who, zap.String("purpose", m.Purpose))
		found[i].Code = code
	}
	return found, nil
}

func (c *cli) show(ctx context.Context, t *Tool, queue string, o opts) (int, error) {
	found, err := t.Show(ctx, queue, o.IDs[0], o.reveal)
	if err != nil {
		return ExitError, err
	}
	if o.json {
		enc := json.NewEncoder(c.stdout)
		for _, s := range found {
			if err := enc.Encode(s); err != nil {
				return ExitError, err
			}
		}
		return ExitOK, nil
	}
	for i, s := range found {
		if i > 0 {
			fmt.Fprintln(c.stdout)
		}
		c.printShown(s, i+1, len(found))
	}
	return ExitOK, nil
}

func (c *cli) printShown(s Shown, n, of int) {
	w := c.stdout
	e := s.Entry
	fmt.Fprintf(w, "message %s in %s (%d of %d with this id)\n", e.ID, e.Queue, n, of)
	tw := table(w)
	row := func(k, v string) { fmt.Fprintf(tw, "  %s\t%s\n", k, v) }
	row("reason", fmt.Sprintf("%s (broker: %s)", e.Reason, dash(e.BrokerReason)))
	row("died in", fmt.Sprintf("%s at %s", dash(e.DeathQueue), when(e.DeathTime)))
	row("replays to", dash(e.Channel))
	row("recipient", dash(e.Recipient))
	row("deadline", when(e.Deadline))
	row("age", age(e.Age(c.now())))
	row("deaths", fmt.Sprint(e.Deaths))
	row("replays", fmt.Sprint(e.Replays))
	if e.Status != "" {
		attempts := 0
		if e.Attempts != nil {
			attempts = *e.Attempts
		}
		row("status record", fmt.Sprintf("%s, %d attempts, class %s", e.Status, attempts, dash(e.ErrorClass)))
		row("last error", dash(e.LastError))
	} else {
		row("status record", "none (expired with STATUS_TTL, or never written)")
	}
	if e.Malformed != "" {
		row("malformed", e.Malformed)
	}
	_ = tw.Flush()

	fmt.Fprintln(w, "properties:")
	tw = table(w)
	p := s.Properties
	for _, kv := range [][2]string{
		{"message-id", p.MessageID}, {"content-type", p.ContentType}, {"content-encoding", p.ContentEncoding},
		{"delivery-mode", deliveryMode(p.DeliveryMode)}, {"priority", nonZero(p.Priority)}, {"correlation-id", p.CorrelationID},
		{"reply-to", p.ReplyTo}, {"expiration", p.Expiration}, {"timestamp", when(p.Timestamp)}, {"type", p.Type},
		{"user-id", p.UserID}, {"app-id", p.AppID}, {"redelivered", fmt.Sprint(p.Redelivered)},
	} {
		if kv[1] != "" && kv[1] != "-" {
			row(kv[0], kv[1])
		}
	}
	_ = tw.Flush()

	fmt.Fprintln(w, "headers:")
	tw = table(w)
	keys := make([]string, 0, len(s.Headers))
	for k := range s.Headers {
		if k != envelope.HeaderXDeath {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := fmt.Sprint(s.Headers[k])
		if k == envelope.HeaderDeadline || k == envelope.HeaderDueAt {
			if t, ok := envelope.HeaderTime(amqp.Table{k: s.Headers[k]}, k); ok {
				v += " (" + t.UTC().Format(time.RFC3339) + ")"
			}
		}
		row(k, v)
	}
	_ = tw.Flush()
	if len(s.Deaths) > 0 {
		fmt.Fprintln(w, "  x-death (most recent first):")
		for i, dd := range s.Deaths {
			fmt.Fprintf(w, "    #%d %s in %s via %s [%s], %d time(s), at %s\n", i+1, dd.Reason, dd.Queue, dash(dd.Exchange),
				strings.Join(dd.RoutingKeys, ","), dd.Count, when(dd.Time))
		}
	}
	fmt.Fprintln(w, "body:")
	if s.BodyBase64 != "" {
		fmt.Fprintf(w, "  (not JSON) %q\n", s.Body)
	} else {
		b, _ := json.MarshalIndent(s.Body, "  ", "  ")
		fmt.Fprintf(w, "  %s\n", b)
	}
	if s.Code != "" {
		fmt.Fprintf(w, "code: %s  (revealed with --reveal; this access was logged)\n", s.Code)
	}
}

// maskedBody returns the body for show: parsed JSON with the sealed code
// masked, or (not JSON) the text and its base64.
func maskedBody(body []byte) (any, string) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return string(body), base64.StdEncoding.EncodeToString(body)
	}
	if m, ok := v.(map[string]any); ok {
		if _, has := m["sealedCode"]; has {
			m["sealedCode"] = SealedMask
		}
	}
	return v, ""
}

// taskID is the body's taskId, when it decodes.
func taskID(in inspected) string {
	if in.msg != nil {
		return in.msg.TaskID
	}
	return ""
}

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func when(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// age prints a duration the way an operator reads it: 45s, 12m, 3h5m, 2d4h.
func age(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

func deliveryMode(m uint8) string {
	switch m {
	case amqp.Persistent:
		return "2 (persistent)"
	case amqp.Transient:
		return "1 (transient)"
	}
	return ""
}

func nonZero(n uint8) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprint(n)
}
