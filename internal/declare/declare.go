package declare

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/mgmt"
	"github.com/msgpulse/msgpulse/internal/redact"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitError   = 1
	ExitPending = 2 // plan: changes pending; also usage errors
)

// Usage is the command's synopsis.
const Usage = `usage: topology <command> [flags]

Commands:
  declare   declare every exchange, queue and binding of the model (idempotent).
            Refuses, declaring nothing, if an existing resource differs.
  plan      compare the model with the broker (management API) and print what
            declare would create and what conflicts. Exit 0 in sync, 2 pending, 1 error.
  export    write RabbitMQ definitions JSON for the model.
            -o FILE          write to FILE instead of stdout
            -vhost NAME      vhost in the definitions (default /)
            -dev-user U:P    include a user with full permissions (local stacks only)
            -broker-version  model the given broker version (default: newest)

Quiet on stderr unless something is wrong; -v (anywhere) also prints its
info lines (broker connected, what was declared).
`

// Command is the program's Run: Main on the process's stdout and stderr.
func Command(ctx context.Context, cfg config.Topology, log *zap.Logger, args []string) int {
	return Main(ctx, cfg, log, args, os.Stdout, os.Stderr)
}

// Main runs one subcommand and returns the process exit code.
func Main(ctx context.Context, cfg config.Topology, log *zap.Logger, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, Usage)
		return ExitPending
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.DeclareTimeout)
	defer cancel()
	var err error
	code := ExitOK
	switch args[0] {
	case "declare":
		err = Declare(ctx, cfg, log, stdout)
	case "plan":
		var inSync bool
		inSync, err = Plan(ctx, cfg, stdout)
		if err == nil && !inSync {
			code = ExitPending
		}
	case "export":
		return exportCmd(cfg, args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "topology: unknown command %q\n\n%s", args[0], Usage)
		return ExitPending
	}
	if err != nil {
		var ce *broker.ConflictError
		if errors.As(err, &ce) {
			fmt.Fprint(stderr, ConflictReport(ce.Conflicts))
		} else {
			fmt.Fprintf(stderr, "topology %s: %v\n", args[0], err)
		}
		return ExitError
	}
	return code
}

// Declare checks for conflicts and then declares the whole model.
func Declare(ctx context.Context, cfg config.Topology, log *zap.Logger, out io.Writer) error {
	conn, err := broker.Dial(ctx, broker.Config{URL: cfg.AMQPURL, ConnectionName: "msgpulse-topology", Logger: log})
	if err != nil {
		return fmt.Errorf("connect to %s: %w", redact.Passwords(cfg.AMQPURL), err)
	}
	defer func() { _ = conn.Close() }()
	version, _ := conn.Properties["version"].(string)
	m, err := topology.Build(cfg.Model, version)
	if err != nil {
		return err
	}
	for _, n := range m.Notes {
		fmt.Fprintln(out, "note:", n)
	}

	// The management API gives the precise, per-argument picture; the AMQP
	// preflight below is the broker's own check and runs either way.
	var plan *topology.Plan
	if mc, err := mgmt.New(cfg.ManagementURL, 10*time.Second); err == nil {
		state, err := mc.State(ctx, mgmt.VHostOf(cfg.AMQPURL))
		if err != nil {
			log.Warn("management API unavailable; relying on the broker's equivalence check alone", zap.Error(err))
		} else {
			p := topology.Diff(m, state)
			if c := p.Conflicts(); len(c) > 0 {
				return &broker.ConflictError{Conflicts: c}
			}
			plan = &p
		}
	}
	if err := broker.Preflight(conn, m); err != nil {
		return err
	}
	if err := broker.Declare(conn, m); err != nil {
		return err
	}
	if plan != nil && plan.InSync() {
		fmt.Fprintf(out, "topology in sync: %d exchanges, %d queues, %d bindings; nothing changed\n", len(m.Exchanges), len(m.Queues), len(m.Bindings))
		return nil
	}
	if plan != nil {
		for _, c := range plan.Changes {
			if c.Kind == topology.Create {
				fmt.Fprintln(out, "created", c.Resource, c.Name)
			}
		}
	}
	fmt.Fprintf(out, "topology declared: %d exchanges, %d queues, %d bindings\n", len(m.Exchanges), len(m.Queues), len(m.Bindings))
	return nil
}

// Plan prints what declare would do and reports whether all is in sync.
func Plan(ctx context.Context, cfg config.Topology, out io.Writer) (bool, error) {
	mc, err := mgmt.New(cfg.ManagementURL, 10*time.Second)
	if err != nil {
		return false, err
	}
	ov, err := mc.Overview(ctx)
	if err != nil {
		return false, fmt.Errorf("%w (is the rabbitmq_management plugin enabled? RABBITMQ_MANAGEMENT_URL=%s)", err, redact.Passwords(cfg.ManagementURL))
	}
	m, err := topology.Build(cfg.Model, ov.RabbitMQVersion)
	if err != nil {
		return false, err
	}
	vhost := mgmt.VHostOf(cfg.AMQPURL)
	state, err := mc.State(ctx, vhost)
	if errors.Is(err, mgmt.ErrNotFound) {
		return false, fmt.Errorf("vhost %q does not exist on the broker", vhost)
	}
	if err != nil {
		return false, err
	}
	p := topology.Diff(m, state)
	fmt.Fprintf(out, "broker %s (RabbitMQ %s), vhost %s, queue type %s\n", mc.Host(), ov.RabbitMQVersion, vhost, m.QueueType)
	for _, c := range p.Changes {
		fmt.Fprintln(out, c.String())
	}
	fmt.Fprintf(out, "%d to create, %d in conflict, %d in sync\n", p.Count(topology.Create), p.Count(topology.Conflict), p.Count(topology.InSync))
	if n := p.Count(topology.Conflict); n > 0 {
		fmt.Fprintln(out, "declare will refuse until the conflicts are resolved; run `topology declare` for the ways forward")
	}
	return p.InSync(), nil
}

func exportCmd(cfg config.Topology, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	outFile := fs.String("o", "", "output file (default stdout)")
	vhost := fs.String("vhost", "/", "vhost")
	devUser := fs.String("dev-user", "", "user:password to include (local stacks only)")
	brokerVersion := fs.String("broker-version", "", "broker version to model")
	if err := fs.Parse(args); err != nil {
		return ExitPending
	}
	m, err := topology.Build(cfg.Model, *brokerVersion)
	if err != nil {
		fmt.Fprintln(stderr, "topology export:", err)
		return ExitError
	}
	opts := topology.ExportOptions{VHost: *vhost}
	if *devUser != "" {
		u, p, ok := strings.Cut(*devUser, ":")
		if !ok || u == "" {
			fmt.Fprintln(stderr, "topology export: -dev-user wants user:password")
			return ExitPending
		}
		opts.Users = []topology.DevUser{{Name: u, Password: p, Tags: []string{"administrator"}}}
	}
	data, err := topology.Export(m, opts)
	if err != nil {
		fmt.Fprintln(stderr, "topology export:", err)
		return ExitError
	}
	if *outFile == "" {
		_, _ = stdout.Write(data)
		return ExitOK
	}
	if err := os.WriteFile(*outFile, data, 0o644); err != nil { //nolint:gosec // definitions are not secret
		fmt.Fprintln(stderr, "topology export:", err)
		return ExitError
	}
	return ExitOK
}

// ConflictReport explains conflicts and the safe ways forward.
func ConflictReport(conflicts []topology.Change) string {
	var b strings.Builder
	fmt.Fprintf(&b, "topology declare: refused, nothing was declared: %d existing setting(s) differ from the model.\n\n", len(conflicts))
	for _, c := range conflicts {
		fmt.Fprintf(&b, "  %s %s: %s is %s on the broker, the model wants %s", c.Resource, c.Name, c.Field, c.Current, c.Wanted)
		if c.Source != "" {
			fmt.Fprintf(&b, " (set by %s)", c.Source)
		}
		b.WriteString("\n")
	}
	b.WriteString("\nRabbitMQ cannot change these on an existing resource (a declare would fail with 406 PRECONDITION_FAILED).\nSafe ways forward:\n")
	n := 1
	for _, c := range conflicts {
		if hint := matchHint(c); hint != "" {
			fmt.Fprintf(&b, "  %d. keep the broker's value: %s, then run topology declare again.\n", n, hint)
			n++
		}
	}
	first := conflicts[0]
	if first.Resource == "exchange" {
		fmt.Fprintf(&b, "  %d. recreate exchange %s: it holds no messages, but publishes through it fail while it is missing, so stop the\n"+
			"     producers (cmd/api, cmd/consumer), delete it (rabbitmqadmin delete exchange name=%s, or the management UI),\n"+
			"     then run topology declare and start them again.\n", n, first.Name, first.Name)
	} else {
		fmt.Fprintf(&b, "  %d. recreate queue %s with the model's settings once it is empty: stop the producers (cmd/api), let the consumers drain it\n"+
			"     (rabbitmqctl list_queues name messages), delete it (rabbitmqctl delete_queue %s), then run topology declare.\n", n, first.Name, first.Name)
		n++
		fmt.Fprintf(&b, "  %d. for a dead-letter queue, save its messages first: dlq purge --queue NAME --all --yes --export FILE.\n", n)
	}
	n++
	fmt.Fprintf(&b, "  %d. for a zero-downtime move (e.g. classic to quorum), declare the new topology in a new vhost, move the programs there\n"+
		"     (AMQP_URL), and retire the old vhost when its queues are empty.\n", n)
	return b.String()
}

// matchHint says which setting would make the model match the broker.
func matchHint(c topology.Change) string {
	if c.Source == "" || c.Current == "(none)" {
		return ""
	}
	val := c.Current
	if c.Field == topology.ArgMessageTTL {
		if ms, err := strconv.ParseInt(c.Current, 10, 64); err == nil {
			val = envconf.FormatDuration(time.Duration(ms) * time.Millisecond)
		}
	}
	return fmt.Sprintf("set %s=%s", c.Source, val)
}
