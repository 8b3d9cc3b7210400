package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// PeerResult is what bench/asynq printed (-json): hibiken/asynq's no-op
// worker on the same machine in the same `make bench` run, the task queue
// a Go user would pick instead of msgpulse. It is measured by a module of
// its own, so msgpulse does not depend on asynq; loadgen only runs it
// (`loadgen peer`) and reads what it printed.
type PeerResult struct {
	Tool        string    `json:"tool"`
	Version     string    `json:"version"`
	Tasks       int       `json:"tasks"`
	Concurrency int       `json:"concurrency"`
	Rounds      []float64 `json:"roundsPerSec"`
	Median      float64   `json:"medianPerSec"`
	// DB is the Redis database it ran in, and OtherKeys how many keys that
	// are not asynq's that database held: not 0, it was not its own.
	DB        int   `json:"db"`
	OtherKeys int64 `json:"otherKeys"`
	// CPU is each round's CPU time over its timed part (the asynq process
	// is the worker then), per task processed; EnqueueCPU over its enqueue
	// (the asynq process is the client, one Enqueue at a time), per task
	// enqueued. Both from loadgen peer.
	CPU        []*CPU `json:"cpu,omitempty"`
	EnqueueCPU []*CPU `json:"enqueueCpu,omitempty"`
	// Started is when loadgen peer started it.
	Started time.Time `json:"started,omitzero"`
}

// ReadPeers reads what `loadgen peer --json` printed (a report holding
// its peers), or one PeerResult as bench/asynq -json prints it.
func ReadPeers(path string) ([]*PeerResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err == nil && len(r.Peers) > 0 {
		for _, p := range r.Peers {
			if p.Median <= 0 {
				return nil, fmt.Errorf("%s: no median at concurrency %d", path, p.Concurrency)
			}
		}
		return r.Peers, nil
	}
	var p PeerResult
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if p.Median <= 0 {
		return nil, fmt.Errorf("%s: no median", path)
	}
	return []*PeerResult{&p}, nil
}

// PeerOptions shape `loadgen peer`.
type PeerOptions struct {
	Bin           string // the bench/asynq binary; empty: built from the source tree
	Concurrencies []int
	Tasks         int
	Rounds        int
	DB            int // the peer's own Redis database
}

// Peer runs bench/asynq (-sync) once per concurrency against REDIS_URL's
// Redis in database p.DB, and reads the CPU time of its process, Redis,
// RabbitMQ and this process from /proc around each round's enqueue and
// timed part. Before each timed part it waits for the machine to go quiet
// (Options.QuietWait), as the consumer binary's runs do.
func Peer(ctx context.Context, o *Options, p PeerOptions) ([]*PeerResult, error) {
	if o.RedisMode != "" && o.RedisMode != "single" {
		return nil, fmt.Errorf("the peer needs one Redis (REDIS_MODE=single), not %s", o.RedisMode)
	}
	ropt, err := redis.ParseURL(o.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	bin := p.Bin
	if bin == "" {
		dir, err := os.MkdirTemp("", "loadgen-peer-")
		if err != nil {
			return nil, err
		}
		defer func() { _ = os.RemoveAll(dir) }()
		if bin, err = buildPeer(ctx, dir); err != nil {
			return nil, err
		}
	}
	var out []*PeerResult
	for _, c := range p.Concurrencies {
		args := []string{"-json", "-sync", "-redis", ropt.Addr, "-db", strconv.Itoa(p.DB),
			"-tasks", strconv.Itoa(p.Tasks), "-rounds", strconv.Itoa(p.Rounds), "-concurrency", strconv.Itoa(c)}
		res, err := runPeer(ctx, o, bin, args, p.Tasks)
		if err != nil {
			return nil, fmt.Errorf("peer at concurrency %d: %w", c, err)
		}
		o.progress("peer: %s %s no-op worker at concurrency %d: rounds %s tasks/s, median %.0f (Redis database %d)", res.Tool, res.Version, c, rates(res.Rounds), res.Median, res.DB)
		out = append(out, res)
	}
	return out, nil
}

// buildPeer builds bench/asynq, a module of its own, into dir.
func buildPeer(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", fmt.Errorf("%w; or pass --bin with a built bench/asynq", err)
	}
	bin := filepath.Join(dir, "asynq-noop")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	cmd.Dir = filepath.Join(root, "bench", "asynq")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build in %s: %w\n%s", cmd.Dir, err, out)
	}
	return bin, nil
}

// runPeer runs the peer binary once and answers its sync lines, reading
// the CPU time around each round's enqueue and timed part.
func runPeer(ctx context.Context, o *Options, bin string, args []string, tasks int) (*PeerResult, error) {
	started := time.Now().UTC()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = progressWriter(o)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	pid := cmd.Process.Pid
	children.Store(pid, true)
	defer children.Delete(pid)
	s := peerSession{pid: pid, tasks: tasks, quiet: o.quiet, meter: o.meter}
	res, serr := s.follow(ctx, stdout, stdin)
	_ = stdin.Close()
	if err := cmd.Wait(); err != nil {
		return nil, errors.Join(fmt.Errorf("%s: %w", bin, err), serr)
	}
	if serr != nil {
		return nil, serr
	}
	res.CPU, res.EnqueueCPU, res.Started = s.cpu, s.enqueue, started
	return res, nil
}

// peerSession follows one run of the peer binary.
type peerSession struct {
	pid   int
	tasks int
	// quiet and meter take the readings: Options' own, but for a test.
	quiet   func(ctx context.Context, what string) *Quiet
	meter   func(ctx context.Context, procs map[string]int, before *Quiet) *measured
	reading *measured
	cpu     []*CPU
	enqueue []*CPU
}

// follow reads the peer's stdout: a sync line is answered on in once
// its reading is taken; the JSON line is the result.
func (s *peerSession) follow(ctx context.Context, out io.Reader, in io.Writer) (*PeerResult, error) {
	var res *PeerResult
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "{") {
			var p PeerResult
			if err := json.Unmarshal([]byte(line), &p); err != nil {
				return nil, fmt.Errorf("peer result %q: %w", line, err)
			}
			res = &p
			continue
		}
		event, round, err := parseSync(line)
		if err != nil {
			return nil, err
		}
		s.step(ctx, event, round)
		if _, err := io.WriteString(in, "\n"); err != nil {
			return nil, fmt.Errorf("answering %q: %w", line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if res == nil {
		return nil, errors.New("the peer printed no result")
	}
	return res, nil
}

// step takes the reading a sync event asks for.
func (s *peerSession) step(ctx context.Context, event string, round int) {
	procs := map[string]int{RolePeer: s.pid}
	switch event {
	case "enqueue":
		s.reading = s.meter(ctx, procs, nil)
	case "start":
		s.enqueue = append(s.enqueue, s.reading.stop(s.tasks))
		before := s.quiet(ctx, fmt.Sprintf("peer round %d", round))
		s.reading = s.meter(ctx, procs, before)
	case "end":
		s.cpu = append(s.cpu, s.reading.stop(s.tasks))
		s.reading = nil
	}
}

// parseSync reads a peer's "sync <event> <round>" line.
func parseSync(line string) (event string, round int, err error) {
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "sync" {
		return "", 0, fmt.Errorf("peer said %q, want sync <event> <round> or its JSON result", line)
	}
	switch f[1] {
	case "enqueue", "start", "end":
	default:
		return "", 0, fmt.Errorf("peer said %q: unknown event %q", line, f[1])
	}
	if round, err = strconv.Atoi(f[2]); err != nil || round < 1 {
		return "", 0, fmt.Errorf("peer said %q: bad round", line)
	}
	return f[1], round, nil
}

// progressWriter is where a child's own messages go: the progress writer,
// or nowhere.
func progressWriter(o *Options) io.Writer {
	if o.Progress != nil {
		return o.Progress
	}
	return io.Discard
}

// peerTarget compares the consumer process with the peer's no-op worker,
// both from the same run, each at the best of the concurrencies it was
// measured at (a user tunes either): the binary with the SMS log provider
// (nothing but a line on stdout per message, as near a no-op as the
// binary has) at CONCURRENCY and at the wide concurrency, else, in a
// report from before that row, the binary through SMTP.
func peerTarget(r Report) Target {
	t := Target{Figure: "Consumer process vs asynq's no-op worker, same run", Want: "more msg/s than asynq", Value: notMeasured}
	c := r.Consumer
	if len(r.Peers) == 0 || c == nil {
		return t
	}
	best := r.Peers[0]
	for _, p := range r.Peers[1:] {
		if p.Median > best.Median {
			best = p
		}
	}
	rate, what := c.Median.Binary, fmt.Sprintf("consumer binary, SMS log provider, CONCURRENCY=%d", c.Concurrency)
	if c.Median.BinaryWide > rate {
		rate, what = c.Median.BinaryWide, fmt.Sprintf("consumer binary, SMS log provider, CONCURRENCY=%d", c.WideConcurrency)
	}
	if rate == 0 {
		rate, what = c.Median.SMTP, "consumer binary, SMTP sink"
	}
	if rate > 0 {
		t.Value = fmt.Sprintf("%.0f msg/s (%s) vs %.0f tasks/s (%s %s, concurrency %d)", rate, what, best.Median, best.Tool, best.Version, best.Concurrency)
		if len(r.Peers) > 1 || c.WideConcurrency > 0 {
			t.Value += "; each at its best concurrency"
		}
		met := rate > best.Median
		t.Met = &met
	}
	return t
}

// PeerTolerance is how far the peer in make bench may be from the same
// peer run alone on the same machine minutes apart (issue 38): further,
// and something in the bench's conditions, not the peer, moved it.
const PeerTolerance = 0.15

// peerAloneTarget checks the peer measured in the run against the same
// peer run alone, concurrency by concurrency.
func peerAloneTarget(r Report) Target {
	t := Target{Figure: "asynq's no-op worker in make bench vs the same run alone, minutes apart", Want: fmt.Sprintf("within %.0f%%", PeerTolerance*100), Value: notMeasured}
	var parts []string
	met := true
	for _, p := range r.Peers {
		a := peerAt(r.PeersAlone, p.Concurrency, p.Tasks)
		if a == nil {
			continue
		}
		ratio := p.Median / a.Median
		part := fmt.Sprintf("concurrency %d: %.0f vs %.0f tasks/s alone (%.2f)", p.Concurrency, p.Median, a.Median, ratio)
		if !p.Started.IsZero() && !a.Started.IsZero() {
			part += fmt.Sprintf(", %.0f min apart", p.Started.Sub(a.Started).Abs().Minutes())
		}
		// What else ran is what moves the peer (docs/performance.md).
		ps, ok1 := summarizeCPU(p.CPU)
		as, ok2 := summarizeCPU(a.CPU)
		if ok1 && ok2 {
			part += fmt.Sprintf(", the rest of the machine %.0f vs %.0f µs per task", ps.RestUs, as.RestUs)
		}
		parts = append(parts, part)
		met = met && ratio >= 1-PeerTolerance && ratio <= 1+PeerTolerance
	}
	if len(parts) > 0 {
		t.Value = strings.Join(parts, "; ")
		t.Met = &met
	}
	return t
}

// peerAt is the peer run at concurrency with tasks per round, or nil.
func peerAt(ps []*PeerResult, concurrency, tasks int) *PeerResult {
	for _, p := range ps {
		if p.Concurrency == concurrency && p.Tasks == tasks {
			return p
		}
	}
	return nil
}

// rates prints per-round rates as "a, b, c".
func rates(xs []float64) string {
	s := ""
	for i, x := range xs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%.0f", x)
	}
	return s
}
