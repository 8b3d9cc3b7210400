package dlq

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/redact"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1 // the message names the queue and the cause
	ExitUsage = 2 // bad arguments; also purge without --yes
)

// Usage is the command's synopsis.
const Usage = `usage: dlq <command> [flags]

Reads, replays and purges msgpulse's dead-letter queues without losing a
message. Pick the queue with --channel mail|sms|wecom or --queue NAME (any DLQ of
the topology model, e.g. the relay's); stats covers every DLQ without one.
--json prints machine output: one JSON document for stats, replay and purge,
one JSON object per line for list and show.

Commands:
  stats   [--channel C | --queue Q] [--limit N] [--json]
          messages per DLQ by reason (the consumer's, and the broker's),
          with the oldest and newest death. Reads at most N per queue.
  list    (--channel C | --queue Q) [--reason R] [--since 1h] [--limit 50] [--json]
          one line per dead letter: id, channel, masked recipient, reason,
          where and when it died, deaths, replays, the consumer's error,
          attempts, age (since created).
  show    (--channel C | --queue Q) [--reveal] [--json] ID
          the whole message: properties, headers, x-death, status record,
          body with the sealed code masked. --reveal opens the code (needs
          CODE_SECRET); every reveal is logged with your OS user.
  replay  (--channel C | --queue Q) (--id ID... | --all | --reason R)
          [--since D] [--rate N/s] [--dry-run] [--force] [--limit N] [--json]
          republish each to its channel's exchange (confirmed, mandatory),
          then remove it from the DLQ. Skips messages past their deadline
          and malformed ones unless --force. Counts replayed/skipped/failed.
  purge   (--channel C | --queue Q) (--id ID... | --reason R | --all)
          [--since D] [--limit N] --yes [--export FILE] [--json]
          delete. --export FILE first writes them as JSON lines and fsyncs;
          nothing is deleted if that fails. Without --yes: says how many.

Reasons (--reason): rejected expired maxlen delivery_limit (the broker's);
malformed permanent retries_exhausted deadline panic (the consumer's, from
its status record); unknown. --reason matches either kind.

stats, list, show and replay --dry-run never take a message from a DLQ:
they count its depth and read its log, queue.<ch>.dlq.log, a copy the
broker keeps of every dead letter. Only replay and purge remove dead
letters; on a quorum DLQ they put back what they pass over as fresh copies
(a give-back would count toward its delivery limit). See docs/oncall.md.
Quiet on stderr unless something is wrong (a purge and a reveal are always
logged there, for audit); -v (anywhere) also prints its info lines.
Exit codes: 0 ok, 1 error, 2 usage (and purge without --yes).
`

// Command is the program's Run: Main on the process's stdout and stderr.
// SIGINT (ctx) stops a replay or purge between two messages; whatever it
// holds goes back to the DLQ.
func Command(ctx context.Context, cfg config.DLQ, log *zap.Logger, args []string) int {
	return Main(ctx, cfg, log, args, os.Stdout, os.Stderr)
}

// Main runs one command and returns the process exit code.
func Main(ctx context.Context, cfg config.DLQ, log *zap.Logger, args []string, stdout, stderr io.Writer) int {
	c := &cli{cfg: cfg, log: log, stdout: stdout, stderr: stderr, now: time.Now}
	return c.main(ctx, args)
}

// cli is one invocation. The hooks are for tests.
type cli struct {
	cfg            config.DLQ
	log            *zap.Logger
	stdout, stderr io.Writer
	now            func() time.Time
	// afterConfirm runs after the n-th replayed message was confirmed and
	// before it is acked; an error stops the replay there, as a crash
	// would (the message is then both republished and still in the DLQ).
	afterConfirm func(n int) error
	// wrapExport wraps the export file's writer (to make it fail).
	wrapExport func(io.Writer) io.Writer
}

// opts are the parsed flags of any command.
type opts struct {
	cmd     string
	channel string
	queue   string
	json    bool
	Options
	// show
	reveal bool
	// purge
	yes    bool
	export string
}

type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

func (c *cli) main(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, Usage)
		return ExitUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(c.stdout, Usage)
		return ExitOK
	}
	o, err := parse(args[0], args[1:], c.cfg.ScanMax, c.stderr)
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "dlq: %v\n", err)
		if ue := (*usageError)(nil); errors.As(err, &ue) && o.cmd == "" {
			fmt.Fprint(c.stderr, "\n", Usage)
		}
		return ExitUsage
	}
	model, err := topology.Build(c.cfg.Model, "")
	if err != nil {
		fmt.Fprintf(c.stderr, "dlq: topology: %v\n", err)
		return ExitUsage
	}
	queues, err := resolveQueues(model, o)
	if err != nil {
		fmt.Fprintf(c.stderr, "dlq %s: %v\n", o.cmd, err)
		return ExitUsage
	}
	d, closeAll, err := c.connect(ctx, model)
	if err != nil {
		fmt.Fprintf(c.stderr, "dlq %s: %v\n", o.cmd, err)
		return ExitError
	}
	defer closeAll()
	var code int
	switch o.cmd {
	case "stats":
		code, err = c.stats(ctx, d, queues, o)
	case "list":
		code, err = c.list(ctx, d, queues[0], o)
	case "show":
		code, err = c.show(ctx, d, queues[0], o)
	case "replay":
		code, err = c.replay(ctx, d, queues[0], o)
	case "purge":
		code, err = c.purge(ctx, d, queues[0], o)
	}
	if worn, wornMax := d.Worn(); worn > 0 {
		c.warn(fmt.Sprintf("%d message(s) read have been delivered %d+ times (x-delivery-count up to %d). On quorum queues RabbitMQ 4 "+
			"drops a message past the queue's delivery-limit (default 20) since DLQs have no dead-letter exchange: replay them, or "+
			"purge --export them, and read DLQs only with dlq or the console (the management UI's Get messages gives back too; docs/oncall.md).", worn, DeliveryCountWarn, wornMax))
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "dlq %s: %v\n", o.cmd, err)
		if code == ExitOK {
			code = ExitError
		}
	}
	return code
}

// missing returns the ids asked for with --id that were not seen.
func missing(asked []string, seen map[string]bool) []string {
	var out []string
	for _, id := range asked {
		if !seen[id] {
			out = append(out, id)
		}
	}
	return out
}

// parse reads one command's flags. Positional arguments may come between
// flags (Go's flag package stops at the first one).
func parse(cmd string, args []string, scanMax int, stderr io.Writer) (opts, error) {
	o := opts{cmd: cmd}
	fs := flag.NewFlagSet("dlq "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.channel, "channel", "", "channel whose DLQ to use: mail, sms or wecom")
	fs.StringVar(&o.queue, "queue", "", "DLQ to use, by name (any DLQ of the model)")
	fs.BoolVar(&o.json, "json", false, "machine output")
	var since, rate string
	sel := func() {
		fs.Var((*idList)(&o.IDs), "id", "message id (= taskId); repeat or comma-separate for more")
		fs.BoolVar(&o.All, "all", false, "every message in the queue")
	}
	filters := func() {
		fs.StringVar(&o.Reason, "reason", "", "only messages with this reason (the broker's or the consumer's)")
		fs.StringVar(&since, "since", "", "only messages that died within this long (e.g. 30m, 1h, 2d)")
	}
	switch cmd {
	case "stats":
		fs.IntVar(&o.Limit, "limit", scanMax, "most messages read per queue")
	case "list":
		filters()
		fs.IntVar(&o.Limit, "limit", 50, "most lines shown (0 = all)")
	case "show":
		fs.BoolVar(&o.reveal, "reveal", false, "open the sealed verification code (logged)")
	case "replay":
		sel()
		filters()
		fs.StringVar(&rate, "rate", "", "most republishes per second, e.g. 20/s, 300/m (default: unlimited)")
		fs.BoolVar(&o.DryRun, "dry-run", false, "say what would be replayed; change nothing")
		fs.BoolVar(&o.Force, "force", false, "also replay messages past their deadline, and malformed ones")
		fs.IntVar(&o.Limit, "limit", 0, "replay at most this many (0 = all selected)")
	case "purge":
		sel()
		filters()
		fs.BoolVar(&o.yes, "yes", false, "really delete")
		fs.StringVar(&o.export, "export", "", "first write the messages to this new file (JSON lines, fsynced)")
		fs.IntVar(&o.Limit, "limit", 0, "delete at most this many (0 = all selected)")
	default:
		return opts{}, usagef("unknown command %q", cmd)
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return o, err
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos, args = append(pos, args[0]), args[1:]
	}
	if o.channel != "" && o.queue != "" {
		return o, usagef("give --channel or --queue, not both")
	}
	if cmd != "stats" && o.channel == "" && o.queue == "" {
		return o, usagef("%s needs --channel mail|sms|wecom or --queue NAME", cmd)
	}
	if o.Limit < 0 {
		return o, usagef("--limit must not be negative")
	}
	if o.Reason != "" && !KnownReason(o.Reason) {
		return o, usagef("--reason %q: want one of %s", o.Reason, strings.Join(Reasons, ", "))
	}
	if since != "" {
		d, err := parseSince(since)
		if err != nil {
			return o, usagef("--since %q: %v", since, err)
		}
		o.Since = d
	}
	if rate != "" {
		r, err := parseRate(rate)
		if err != nil {
			return o, usagef("--rate %q: %v", rate, err)
		}
		o.Rate = r
	}
	switch cmd {
	case "show":
		if len(pos) != 1 {
			return o, usagef("show needs exactly one message id")
		}
		o.IDs = pos
	case "replay", "purge":
		if len(pos) > 0 {
			return o, usagef("unexpected argument %q (ids go after --id)", pos[0])
		}
		n := 0
		for _, set := range []bool{len(o.IDs) > 0, o.All, o.Reason != ""} {
			if set {
				n++
			}
		}
		if n != 1 {
			return o, usagef("%s needs exactly one of --id, --all, --reason", cmd)
		}
	default:
		if len(pos) > 0 {
			return o, usagef("unexpected argument %q", pos[0])
		}
	}
	return o, nil
}

// idList is a repeatable, comma-separated --id.
type idList []string

func (l *idList) String() string { return strings.Join(*l, ",") }

func (l *idList) Set(s string) error {
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// parseSince reads a Go duration, or whole days as "2d".
func parseSince(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days <= 0 {
			return 0, errors.New("want a duration such as 30m, 1h or 2d")
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, errors.New("want a duration such as 30m, 1h or 2d")
	}
	return d, nil
}

// parseRate reads N, N/s, N/m or N/h as messages per second.
func parseRate(s string) (float64, error) {
	num, unit, _ := strings.Cut(s, "/")
	per := 1.0
	switch unit {
	case "", "s":
	case "m":
		per = 60
	case "h":
		per = 3600
	default:
		return 0, errors.New("want N/s, N/m or N/h")
	}
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || n <= 0 {
		return 0, errors.New("want a positive number, e.g. 20/s")
	}
	return n / per, nil
}

// resolveQueues maps --channel / --queue to DLQ names of the model.
func resolveQueues(m *topology.Model, o opts) ([]string, error) {
	all := DeadLetterQueues(m)
	switch {
	case o.channel != "":
		ct, err := m.Channel(o.channel)
		if err != nil {
			return nil, fmt.Errorf("--channel %q: want one of %s", o.channel, strings.Join(topology.Channels, ", "))
		}
		return []string{ct.DeadLetterQueue}, nil
	case o.queue != "":
		for _, q := range all {
			if q == o.queue {
				return []string{q}, nil
			}
		}
		return nil, fmt.Errorf("--queue %q is not a dead-letter queue of the model (known: %s)", o.queue, strings.Join(all, ", "))
	}
	return all, nil
}

func (c *cli) warn(msg string) {
	fmt.Fprintln(c.stderr, "dlq: warning:", msg)
}

// connect dials the broker (required) and Redis (optional: without it,
// reasons are the broker's), and returns the Tool on them and what closes
// them.
func (c *cli) connect(ctx context.Context, m *topology.Model) (*Tool, func(), error) {
	conn, err := broker.Dial(ctx, broker.Config{URL: c.cfg.AMQPURL, ConnectionName: "msgpulse-dlq", Logger: c.log})
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", redact.Passwords(c.cfg.AMQPURL), err)
	}
	closers := []func(){func() { _ = conn.Close() }}
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	var st *status.Store
	rc, err := rdb.Open(c.cfg.RedisMode, c.cfg.RedisURL, rdb.WithClientName("msgpulse-dlq"), rdb.WithPoolSize(2), rdb.WithAutoPipeline(c.cfg.RedisAutoPipeline))
	if err == nil {
		closers = append(closers, func() { _ = rc.Close() })
		st, err = status.New(rc, status.Config{Prefix: c.cfg.RedisPrefix})
	}
	if err != nil {
		c.warn(fmt.Sprintf("status records unavailable (%v): reasons are the broker's only", err))
		st = nil
	}
	t := NewTool(conn, m, st, ToolConfig{DLQ: c.cfg, Who: zap.String("os_user", currentUser()), Log: c.log, Warn: c.warn, Now: c.now})
	t.afterConfirm, t.wrapExport = c.afterConfirm, c.wrapExport
	return t, closeAll, nil
}

// selector decides which messages a command acts on.
type selector struct {
	ids    map[string]bool
	all    bool
	reason string
	since  time.Duration
	now    time.Time
}

func (t *Tool) selector(o Options) selector {
	s := selector{all: o.All, reason: o.Reason, since: o.Since, now: t.now()}
	if len(o.IDs) > 0 {
		s.ids = map[string]bool{}
		for _, id := range o.IDs {
			s.ids[id] = true
		}
	}
	return s
}

func (s selector) match(e *Entry, taskID string) bool {
	if s.ids != nil && !s.ids[e.ID] && !s.ids[taskID] {
		return false
	}
	if s.reason != "" && e.Reason != s.reason && e.BrokerReason != s.reason {
		return false
	}
	if s.since > 0 && (e.DeathTime == nil || e.DeathTime.Before(s.now.Add(-s.since))) {
		return false
	}
	return true
}

// currentUser names who ran the command, for the audit log: the person
// behind sudo when there is one.
func currentUser() string {
	name := ""
	if u, err := user.Current(); err == nil {
		name = u.Username
	} else if v := os.Getenv("USER"); v != "" {
		name = v
	} else {
		name = "uid " + strconv.Itoa(os.Getuid())
	}
	if su := os.Getenv("SUDO_USER"); su != "" && su != name {
		return su + " (as " + name + ")"
	}
	return name
}
