package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/dlq"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/logging"
)

// tool is the dlq.Tool for one request, acting in the name of the
// caller's key. Its warnings are collected for the page.
func (c *Console) tool(r *http.Request, rq *request, warns *[]string) (*dlq.Tool, error) {
	conn, err := c.d.Conn(r.Context())
	if err != nil {
		return nil, fmt.Errorf("RabbitMQ is unavailable: %w", err)
	}
	return dlq.NewTool(conn, c.d.Model, c.d.Status, dlq.ToolConfig{DLQ: c.cfg.DLQ, Who: zap.String("api_key", rq.Caller.Name),
		Log: c.log, Now: c.now, Warn: func(s string) { *warns = append(*warns, s) }}), nil
}

// dlqQueue is the {queue} of the path, if it is a DLQ of the model.
func (c *Console) dlqQueue(r *http.Request) (string, error) {
	q := r.PathValue("queue")
	if slices.Contains(dlq.DeadLetterQueues(c.d.Model), q) {
		return q, nil
	}
	return "", fmt.Errorf("%q is not a dead-letter queue of the topology model", q)
}

// call is one request on one DLQ: the queue of the path, the selection
// the handler's parser read, and the Tool acting for the caller.
type call struct {
	queue string
	o     dlq.Options
	t     *dlq.Tool
	warns []string
}

// onDLQ wraps a handler of one DLQ: the path must name a DLQ of the model
// (404), parse must accept the request (400), and the broker must answer
// (503).
func (c *Console) onDLQ(parse func(*http.Request) (dlq.Options, error), h func(http.ResponseWriter, *http.Request, *request, *call)) func(http.ResponseWriter, *http.Request, *request) {
	return func(w http.ResponseWriter, r *http.Request, rq *request) {
		queue, err := c.dlqQueue(r)
		if err != nil {
			c.fail(w, rq, http.StatusNotFound, err)
			return
		}
		cl := &call{queue: queue}
		if cl.o, err = parse(r); err != nil {
			c.fail(w, rq, http.StatusBadRequest, err)
			return
		}
		if cl.t, err = c.tool(r, rq, &cl.warns); err != nil {
			c.fail(w, rq, http.StatusServiceUnavailable, err)
			return
		}
		h(w, r, rq, cl)
	}
}

// warnings are what the page should say besides: the Tool's, and a
// quorum DLQ's messages wearing out from being read again and again.
func (cl *call) warnings() []string {
	if n, highest := cl.t.Worn(); n > 0 {
		return append(cl.warns, fmt.Sprintf("%d message(s) read have been delivered %d+ times (up to %d). On quorum queues RabbitMQ 4 drops a message "+
			"past the delivery limit: replay them, or export and purge them.", n, dlq.DeliveryCountWarn, highest))
	}
	return cl.warns
}

func noOptions(*http.Request) (dlq.Options, error) { return dlq.Options{}, nil }

// reasonCount is one reason's count, for a sorted display.
type reasonCount struct {
	Reason string
	N      int
}

func sortedCounts(m map[string]int) []reasonCount {
	out := make([]reasonCount, 0, len(m))
	for k, v := range m {
		out = append(out, reasonCount{k, v})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].N != out[j].N {
			return out[i].N > out[j].N
		}
		return out[i].Reason < out[j].Reason
	})
	return out
}

// dlqPage shows every DLQ of the model with its counts by reason and by
// hour of death.
func (c *Console) dlqPage(w http.ResponseWriter, r *http.Request, rq *request) {
	var warns []string
	t, err := c.tool(r, rq, &warns)
	if c.failed(w, rq, err) {
		return
	}
	reps, err := t.Stats(r.Context(), dlq.DeadLetterQueues(c.d.Model), c.cfg.DLQ.ScanMax)
	if c.failed(w, rq, err) {
		return
	}
	type row struct {
		dlq.StatsReport
		Reasons []reasonCount
		Hours   []hourCount
	}
	rows := make([]row, len(reps))
	for i, rep := range reps {
		rows[i] = row{StatsReport: rep, Reasons: sortedCounts(rep.ByReason), Hours: hourCounts(rep.ByHour, c.now())}
	}
	c.render(w, http.StatusOK, "dlq", rq, map[string]any{"Queues": rows, "Warnings": warns})
}

// hourCount is deaths in one hour of the last day.
type hourCount struct {
	Hour     string
	N        int
	X, Y, Px int // the bar in a 144×42 SVG
}

// hourCounts lays the last 24 hours' deaths out oldest first.
func hourCounts(byHour map[time.Time]int, now time.Time) []hourCount {
	top := now.UTC().Truncate(time.Hour)
	peak := 1
	for _, n := range byHour {
		peak = max(peak, n)
	}
	out := make([]hourCount, 24)
	for i := range out {
		h := top.Add(-time.Duration(23-i) * time.Hour)
		n := byHour[h]
		px := n * 40 / peak
		out[i] = hourCount{Hour: h.Format("15h"), N: n, X: i * 6, Y: 41 - px, Px: px}
	}
	return out
}

func (c *Console) options(r *http.Request) (dlq.Options, error) {
	q := r.URL.Query()
	o := dlq.Options{Reason: q.Get("reason"), Limit: c.cfg.ListLimit}
	if o.Reason != "" && !dlq.KnownReason(o.Reason) {
		return o, fmt.Errorf("unknown reason %q", o.Reason)
	}
	if s := q.Get("since"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return o, fmt.Errorf("since %q: want a duration such as 30m or 2h", s)
		}
		o.Since = d
	}
	return o, nil
}

func (c *Console) dlqListPage(w http.ResponseWriter, r *http.Request, rq *request, cl *call) {
	l, err := cl.t.List(r.Context(), cl.queue, cl.o, nil)
	if c.failed(w, rq, err) {
		return
	}
	maskEntries(l.Entries)
	c.render(w, http.StatusOK, "dlqlist", rq, map[string]any{"Queue": cl.queue, "List": l, "More": l.More(cl.o.Limit), "Limit": cl.o.Limit,
		"Reason": cl.o.Reason, "Since": r.URL.Query().Get("since"), "Reasons": dlq.Reasons, "Warnings": cl.warnings()})
}

// shownMessage is a dead letter for the detail page: the body as indented
// JSON text, masked by the allow-list (mask.go), code and digest hidden;
// the summary's error texts and the headers masked by the same rules.
type shownMessage struct {
	dlq.Shown
	BodyText string
	Headers  [][2]string
}

func (c *Console) dlqShowPage(w http.ResponseWriter, r *http.Request, rq *request, cl *call) {
	found, err := cl.t.Show(r.Context(), cl.queue, r.PathValue("id"), false)
	if c.failed(w, rq, err, answer{dlq.ErrNotFound, http.StatusNotFound}) {
		return
	}
	msgs := make([]shownMessage, len(found))
	for i, s := range found {
		body, known := bodyText(s)
		maskEntry(&s.Entry, known)
		msgs[i] = shownMessage{Shown: s, BodyText: body, Headers: headerRows(s.Headers)}
	}
	c.render(w, http.StatusOK, "dlqshow", rq, map[string]any{"Queue": cl.queue, "Messages": msgs, "Warnings": cl.warnings()})
}

// bodyText is the body to display, masked by the allow-list (the code's
// seal and digest hidden), and the full values it masked, so the page's
// error texts can be cleaned of them.
func bodyText(s dlq.Shown) (string, []string) {
	if s.BodyBase64 != "" {
		return "(not JSON: " + strconv.Itoa(len(s.BodyBase64)*3/4) + " bytes, not shown)", nil
	}
	body, known := maskDocument(s.Body)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // html/template escapes it, readably
	_ = enc.Encode(body)
	return b.String(), known
}

// headerRows are the headers to display: msgpulse's and RabbitMQ's in
// full, any other masked.
func headerRows(h map[string]any) [][2]string {
	out := make([][2]string, 0, len(h))
	for k, v := range h {
		if k == envelope.HeaderXDeath {
			continue // shown as the deaths table
		}
		val := fmt.Sprint(v)
		if !headerInFull(k) {
			val = logging.Mask(val)
		}
		out = append(out, [2]string{k, val})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// replay asks for confirmation (with a dry run's counts), then starts the
// replay in the background and shows its progress.
func (c *Console) replay(w http.ResponseWriter, r *http.Request, rq *request, cl *call) {
	o := cl.o
	what := "every message with reason " + o.Reason
	if len(o.IDs) > 0 {
		what = "message " + o.IDs[0]
	}
	if o.Rate > 0 {
		what += fmt.Sprintf(" at most %g per second", o.Rate)
	}
	f := r.PostForm
	if f.Get("confirmed") != "yes" {
		dry := o
		dry.DryRun = true
		rep, err := cl.t.Replay(r.Context(), cl.queue, dry)
		if c.failed(w, rq, err) {
			return
		}
		c.render(w, http.StatusOK, "confirm", rq, map[string]any{"Queue": cl.queue, "What": what, "Dry": rep, "ID": f.Get("id"),
			"Reason": f.Get("reason"), "Rate": f.Get("rate"), "Warnings": cl.warnings()})
		return
	}
	j := c.startReplay(cl.t, rq.Caller.Name, cl.queue, what, o)
	http.Redirect(w, r, "/console/jobs/"+j.ID, http.StatusSeeOther)
}

// replayOptions reads a replay's form: one message id or one known reason,
// and an optional rate.
func replayOptions(r *http.Request) (dlq.Options, error) {
	f := r.PostForm
	var o dlq.Options
	switch id, reason := f.Get("id"), f.Get("reason"); {
	case id != "" && reason == "":
		o.IDs = []string{id}
	case reason != "" && id == "" && dlq.KnownReason(reason):
		o.Reason = reason
	default:
		return o, errors.New("replay needs one message id or one known reason")
	}
	if s := f.Get("rate"); s != "" {
		n, err := strconv.ParseFloat(s, 64)
		if err != nil || n <= 0 {
			return o, fmt.Errorf("rate %q: want a positive number of messages per second", s)
		}
		o.Rate = n
	}
	return o, nil
}

// purgeMax bounds one purge from the console; the rest takes another.
const purgeMax = 1000

// selection reads a purge's selection: explicit ids (what the
// confirmation page listed), else a reason.
func selection(get func(string) string) (dlq.Options, error) {
	if ids := get("ids"); ids != "" {
		return dlq.Options{IDs: strings.Split(ids, ",")}, nil
	}
	reason := get("reason")
	if reason == "" || !dlq.KnownReason(reason) {
		return dlq.Options{}, errors.New("purge needs a known reason")
	}
	return dlq.Options{Reason: reason, Limit: purgeMax}, nil
}

// purgePage lists what a purge would delete and offers the export, then
// the purge of exactly the messages listed.
func (c *Console) purgePage(w http.ResponseWriter, r *http.Request, rq *request, cl *call) {
	l, err := cl.t.List(r.Context(), cl.queue, cl.o, nil)
	if c.failed(w, rq, err) {
		return
	}
	maskEntries(l.Entries)
	ids := make([]string, 0, len(l.Entries))
	for _, e := range l.Entries {
		if !slices.Contains(ids, e.ID) {
			ids = append(ids, e.ID)
		}
	}
	c.render(w, http.StatusOK, "purge", rq, map[string]any{"Queue": cl.queue, "Reason": cl.o.Reason, "List": l, "IDs": strings.Join(ids, ","),
		"More": l.More(cl.o.Limit), "Warnings": cl.warnings()})
}

// purgeQuery and exportForm read the selection from the query or the form.
func purgeQuery(r *http.Request) (dlq.Options, error) { return selection(r.URL.Query().Get) }
func exportForm(r *http.Request) (dlq.Options, error) { return selection(r.PostForm.Get) }

// purgeForm is the purge's own form: exactly the listed ids, confirmed,
// after the export.
func purgeForm(r *http.Request) (dlq.Options, error) {
	f := r.PostForm
	if f.Get("ids") == "" || f.Get("exported") != "yes" || f.Get("confirmed") != "yes" {
		return dlq.Options{}, errors.New("purge deletes the listed messages only after their export was downloaded and the box ticked")
	}
	return selection(f.Get)
}

// export downloads the selected messages as JSON lines (the format of
// `dlq purge --export`), deleting nothing.
func (c *Console) export(w http.ResponseWriter, r *http.Request, rq *request, cl *call) {
	// Buffered, so a failed read shows an error page, not half a file.
	var b bytes.Buffer
	n, err := cl.t.Export(r.Context(), cl.queue, cl.o, &b)
	if c.failed(w, rq, err) {
		return
	}
	c.log.Info("console export", zap.String("api_key", rq.Caller.Name), zap.String("queue", cl.queue), zap.Int("messages", n))
	name := fmt.Sprintf("%s-%s.jsonl", cl.queue, c.now().UTC().Format("20060102T150405Z"))
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	_, _ = w.Write(b.Bytes())
}

// purge deletes exactly the ids the confirmation page listed, once the
// operator said the export was downloaded.
func (c *Console) purge(w http.ResponseWriter, r *http.Request, rq *request, cl *call) {
	rep, err := cl.t.Purge(r.Context(), cl.queue, cl.o, "")
	if c.failed(w, rq, err) {
		return
	}
	c.render(w, http.StatusOK, "job", rq, map[string]any{"Purge": rep, "Queue": cl.queue, "Warnings": cl.warnings()})
}
