package loadgen

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseProcStat(t *testing.T) {
	tests := []struct {
		name  string
		line  string
		comm  string
		ticks int64
		err   bool
	}{
		{"redis", "2272 (redis-server) S 1 2272 2272 0 -1 4194560 1510 0 0 0 1795 2003 0 0 20 0 5 0 1583 76402688 1780 18446744073709551615", "redis-server", 3798, false},
		{"a name with spaces and parentheses", "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 12 30 0 0 20 0 1 0 9 0 0 0", "a (b) c", 42, false},
		{"kernel thread", "77 (kdamond.0) S 2 0 0 0 -1 2129984 0 0 0 0 0 3 0 0 20 0 1 0 60 0 0", "kdamond.0", 3, false},
		{"no name", "77 kdamond S 2", "", 0, true},
		{"too short", "77 (x) S 2 0 0", "", 0, true},
		{"not a number", "77 (x) S 2 0 0 0 -1 0 0 0 0 0 ab 3 0", "", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := parseProcStat(tt.line)
			if tt.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, procStat{comm: tt.comm, ticks: tt.ticks}, s)
		})
	}
}

func TestParseMachineStat(t *testing.T) {
	tests := []struct {
		name        string
		line        string
		busy, total int64
		err         bool
	}{
		// user nice system idle iowait irq softirq steal guest guest_nice:
		// busy is user+nice+system+irq+softirq+steal (guest is in user).
		{"ten fields", "cpu  100 2 30 500 7 1 4 6 9 0", 143, 650, false},
		{"eight fields, an old kernel", "cpu 10 0 5 80 5 0 0 0", 15, 100, false},
		{"a single CPU's line", "cpu0 100 2 30 500 7 1 4 6 0 0", 0, 0, true},
		{"short", "cpu 1 2 3", 0, 0, true},
		{"not a number", "cpu 1 2 3 x 5 6 7 8", 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			busy, total, err := parseMachineStat(tt.line)
			if tt.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, []int64{tt.busy, tt.total}, []int64{busy, total})
		})
	}
}

func TestCPUPerMessageAndRest(t *testing.T) {
	c := &CPU{Messages: 8000, Sec: map[string]float64{RoleConsumer: 0.96, RoleRedis: 0.4, RoleRabbitMQ: 0.6}, MachineSec: 2.2}
	tests := []struct {
		role string
		us   float64
		ok   bool
	}{
		{RoleConsumer, 120, true},
		{RoleRedis, 50, true},
		{RoleRabbitMQ, 75, true},
		{RoleLoadgen, 0, false}, // not read: not zero
	}
	for _, tt := range tests {
		us, ok := c.PerMessageUs(tt.role)
		require.Equal(t, tt.ok, ok, tt.role)
		require.InDelta(t, tt.us, us, 1e-9, tt.role)
	}
	require.InDelta(t, 0.24, c.RestSec(), 1e-9)
	// Tick rounding can make the roles' sum pass the machine's: no negative rest.
	c.MachineSec = 1.9
	require.Zero(t, c.RestSec())
	_, ok := (&CPU{Sec: map[string]float64{RoleRedis: 1}}).PerMessageUs(RoleRedis)
	require.False(t, ok, "no messages, no figure")
}

func TestSummarizeCPUTakesMediansAndCountsBusyStarts(t *testing.T) {
	quiet := &Quiet{Busy: 0.03, Quiet: true}
	busy := &Quiet{Busy: 0.6, Others: []string{"go (12) 0.80 s"}}
	rounds := []*CPU{
		{Messages: 1000, WallSec: 0.1, Sec: map[string]float64{RolePeer: 0.1, RoleRedis: 0.05}, MachineSec: 0.2, Before: quiet},
		nil, // a round that was not read
		{Messages: 1000, WallSec: 0.2, Sec: map[string]float64{RolePeer: 0.3, RoleRedis: 0.07}, MachineSec: 0.5, Before: busy},
		{Messages: 1000, WallSec: 0.125, Sec: map[string]float64{RolePeer: 0.2, RoleRedis: 0.06}, MachineSec: 0.3},
	}
	s, ok := summarizeCPU(rounds)
	require.True(t, ok)
	require.Equal(t, 3, s.Rounds)
	require.Equal(t, map[string]float64{RolePeer: 200, RoleRedis: 60}, s.PerMsgUs)
	require.InDelta(t, 50, s.RestUs, 1e-9)
	require.InDelta(t, 300, s.MachineUs, 1e-9)
	require.InDelta(t, 8000, s.Rate, 1e-9)
	require.Equal(t, 1, s.NotQuiet)
	require.Equal(t, busy.Others, s.Others)

	_, ok = summarizeCPU([]*CPU{nil, {Messages: 0}})
	require.False(t, ok)
}

func TestBusiestNamesTheProcessesThatUsedTheMost(t *testing.T) {
	before := map[int]procStat{1: {"beam.smp", 100}, 2: {"redis-server", 50}, 3: {"go", 10}, 4: {"gone", 5}}
	after := map[int]procStat{
		1: {"beam.smp", 130}, // 0.30 s
		2: {"redis-server", 50},
		3: {"cc1", 20},  // pid reused by a new process: counted from 0
		5: {"gopls", 7}, // started in between
	}
	require.Equal(t, []string{"beam.smp (1) 0.30 s", "cc1 (3) 0.20 s", "gopls (5) 0.07 s"}, busiest(before, after, 3))
	require.Equal(t, []string{"beam.smp (1) 0.30 s"}, busiest(before, after, 1))
	require.Empty(t, busiest(after, after, 3))
}

func TestStraysAreMsgpulseProcessesNotOurs(t *testing.T) {
	procs := map[int]procStat{
		10: {comm: "consumer"}, 11: {comm: "api"}, 12: {comm: "api.test"}, 13: {comm: "loadgen"},
		14: {comm: "redis-server"}, 15: {comm: "asynq-noop"}, 16: {comm: "dlq"},
	}
	require.Equal(t, []string{"consumer (10)", "api (11)", "loadgen (13)", "asynq-noop (15)", "dlq (16)"}, strays(procs, nil))
	require.Equal(t, []string{"api (11)", "dlq (16)"}, strays(procs, map[int]bool{10: true, 13: true, 15: true}))
}

func TestInfoField(t *testing.T) {
	info := "# Server\r\nredis_version:7.0.15\r\nprocess_id:2272\r\nprocess_supervised:no\r\n"
	tests := []struct{ key, want string }{
		{"redis_version", "7.0.15"},
		{"process_id", "2272"},
		{"process", ""}, // a prefix of a key is not the key
		{"tcp_port", ""},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, infoField(info, tt.key), tt.key)
	}
}

// The CPU table: one row per run whose CPU was read, the timed process
// first, "-" where a process could not be read, and the rounds that began
// on a busy machine named with what was running.
func TestCPUTable(t *testing.T) {
	r := goodReport()
	r.API.Rounds[0].MaxCPU = &CPU{Messages: 40000, WallSec: 5, Sec: map[string]float64{RoleAPI: 8, RoleRedis: 5, RoleRabbitMQ: 7.2, RoleLoadgen: 3}, MachineSec: 24}
	r.Consumer.WideConcurrency, r.Consumer.Median.Binary, r.Consumer.Median.BinaryWide = 256, 7000, 8000
	r.Consumer.Rounds[0].BinaryCPU = &CPU{Messages: 8000, WallSec: 1.1, Sec: map[string]float64{RoleConsumer: 0.96, RoleRedis: 0.45, RoleRabbitMQ: 0.584, RoleLoadgen: 0.024}, MachineSec: 2.1,
		Before: &Quiet{Busy: 0.4, WaitedSec: 10, Others: []string{"go (77) 0.31 s"}}}
	r.Consumer.Rounds[0].BinaryWideCPU = &CPU{Messages: 8000, WallSec: 1, Sec: map[string]float64{RoleConsumer: 0.904, RoleRabbitMQ: 0.504}, MachineSec: 1.6, Before: &Quiet{Quiet: true}}
	peer := &PeerResult{Tool: "hibiken/asynq", Version: "v0.26.0", Tasks: 8000, Concurrency: 64, Rounds: []float64{10000}, Median: 10000, DB: 15, Started: r.Started,
		CPU:        []*CPU{{Messages: 8000, WallSec: 0.8, Sec: map[string]float64{RolePeer: 0.56, RoleRedis: 0.4, RoleRabbitMQ: 0.01}, MachineSec: 1, Before: &Quiet{Quiet: true}}},
		EnqueueCPU: []*CPU{{Messages: 8000, WallSec: 0.4, Sec: map[string]float64{RolePeer: 0.2, RoleRedis: 0.16}, MachineSec: 0.4}}}
	alone := *peer
	alone.OtherKeys = 3
	r.Peers, r.PeersAlone = []*PeerResult{peer}, []*PeerResult{&alone}

	var md bytes.Buffer
	WriteMarkdown(&md, MarkdownInput{Report: r})
	for _, want := range []string{
		"## CPU per message",
		"| run | msg/s | the process timed | its CPU | RabbitMQ | Redis | load generator | the system | rest of the machine | rounds begun quiet |",
		"| api, max, per accepted request | 8200 | api | 200 | 180 | 125 | 75 | 505 | 20 | 1 of 1 |",
		"| consumer binary, SMS log provider, CONCURRENCY=64 | 7000 | consumer | 120 | 73 | 56 | 3 | 249 | 10 | 0 of 1 |",
		"| consumer binary, SMS log provider, CONCURRENCY=256 | 8000 | consumer | 113 | 63 | - | - | - | 24 | 1 of 1 |",
		// RabbitMQ's 1 µs is someone else's: not in the peer's system.
		"| hibiken/asynq no-op worker, concurrency 64 | 10000 | asynq process | 70 | 1 | 50 | - | 120 | 4 | 1 of 1 |",
		"| hibiken/asynq client, Enqueue one task at a time | 20000 | asynq process | 25 | - | 20 | - | 45 | 5 | 1 of 1 |",
		"| hibiken/asynq no-op worker, concurrency 64, alone | 10000 |",
		"- consumer binary, SMS log provider, CONCURRENCY=64: go (77) 0.31 s",
		"The peer's Redis database 15 held 3 keys that are not asynq's: it was not a database of its own.",
		"| the same peer run alone on this machine, before the rest of the run (rounds 10000, Redis database 15) | 10000 | concurrency 64 |",
	} {
		require.Contains(t, md.String(), want)
	}
	require.NotContains(t, md.String(), "raw path (echo", "no reading, no row")

	var txt bytes.Buffer
	WriteText(&txt, r)
	require.Contains(t, txt.String(), "CPU per message, µs")
	require.Regexp(t, `consumer binary, SMS log provider, CONCURRENCY=64 +7000 consumer +120 +73 +56 +3 +249 +10 +0/1`, txt.String())

	// Nothing read, no section.
	md.Reset()
	WriteMarkdown(&md, MarkdownInput{Report: goodReport()})
	require.NotContains(t, md.String(), "CPU per message")
}

func TestParseSync(t *testing.T) {
	tests := []struct {
		line  string
		event string
		round int
		err   bool
	}{
		{"sync enqueue 1", "enqueue", 1, false},
		{"sync start 3", "start", 3, false},
		{"sync end 12", "end", 12, false},
		{"sync begin 1", "", 0, true},
		{"sync start 0", "", 0, true},
		{"sync start", "", 0, true},
		{"round 1: 9000 tasks/s", "", 0, true},
	}
	for _, tt := range tests {
		event, round, err := parseSync(tt.line)
		if tt.err {
			require.Error(t, err, tt.line)
			continue
		}
		require.NoError(t, err, tt.line)
		require.Equal(t, tt.event, event)
		require.Equal(t, tt.round, round)
	}
}

// The session answers every sync line once its reading is taken: the
// enqueue's between enqueue and start, the timed part's between start and
// end, the quiet check just before the timed part.
func TestPeerSessionReadsAroundEachRound(t *testing.T) {
	var calls []string
	s := peerSession{pid: os.Getpid(), tasks: 8000,
		quiet: func(_ context.Context, what string) *Quiet {
			calls = append(calls, "quiet "+what)
			return &Quiet{Quiet: true}
		},
		meter: func(_ context.Context, procs map[string]int, before *Quiet) *measured {
			calls = append(calls, "meter")
			require.Equal(t, map[string]int{RolePeer: os.Getpid()}, procs)
			return &measured{meter: startCPU(map[string][]int{RolePeer: {os.Getpid()}}), before: before}
		},
	}
	out := strings.Join([]string{
		"sync enqueue 1", "sync start 1", "sync end 1",
		"sync enqueue 2", "sync start 2", "sync end 2",
		`{"tool":"hibiken/asynq","version":"v0.26.0","tasks":8000,"concurrency":64,"roundsPerSec":[9000,9500],"medianPerSec":9250,"db":15,"otherKeys":0}`,
	}, "\n") + "\n"
	var answers bytes.Buffer
	res, err := s.follow(context.Background(), strings.NewReader(out), &answers)
	require.NoError(t, err)
	require.Equal(t, 9250.0, res.Median)
	require.Equal(t, "\n\n\n\n\n\n", answers.String(), "one answer per sync line")
	require.Equal(t, []string{"meter", "quiet peer round 1", "meter", "meter", "quiet peer round 2", "meter"}, calls)
	require.Len(t, s.enqueue, 2)
	require.Len(t, s.cpu, 2)
	for _, c := range append(s.enqueue, s.cpu...) {
		require.Equal(t, 8000, c.Messages)
		require.Contains(t, c.Sec, RolePeer)
	}
	require.True(t, s.cpu[0].Before.Quiet)
	require.Nil(t, s.enqueue[0].Before, "the enqueue does not wait for a quiet machine")

	for _, tt := range []struct{ name, out, err string }{
		{"no result", "sync enqueue 1\n", "no result"},
		{"a line it cannot read", "sync enqueue 1\nhello\n", `peer said "hello"`},
		{"a broken result", "{\"tool\":\n", "peer result"},
	} {
		s := peerSession{pid: os.Getpid(), tasks: 1, quiet: s.quiet, meter: s.meter}
		_, err := s.follow(context.Background(), strings.NewReader(tt.out), io.Discard)
		require.ErrorContains(t, err, tt.err, tt.name)
	}
}

func TestPeerAloneTarget(t *testing.T) {
	at := func(c int, median float64, started time.Time) *PeerResult {
		return &PeerResult{Tool: "hibiken/asynq", Tasks: 8000, Concurrency: c, Median: median, Started: started}
	}
	t0 := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	withRest := func(p *PeerResult, restSec float64) *PeerResult {
		p.CPU = []*CPU{{Messages: 8000, WallSec: 1, Sec: map[string]float64{RolePeer: 0.6, RoleRedis: 0.4}, MachineSec: 1 + restSec}}
		return p
	}
	tests := []struct {
		name         string
		peers, alone []*PeerResult
		status       string
		value        string
	}{
		{"within", []*PeerResult{at(64, 9000, t0.Add(14*time.Minute)), at(256, 9500, t0.Add(15*time.Minute))}, []*PeerResult{at(64, 10000, t0), at(256, 9000, t0)},
			"met", "concurrency 64: 9000 vs 10000 tasks/s alone (0.90), 14 min apart; concurrency 256: 9500 vs 9000 tasks/s alone (1.06), 15 min apart"},
		{"a third of its speed", []*PeerResult{at(64, 3500, time.Time{})}, []*PeerResult{at(64, 11000, time.Time{})},
			"missed", "concurrency 64: 3500 vs 11000 tasks/s alone (0.32)"},
		{"faster by more than 15%", []*PeerResult{at(64, 11600, time.Time{})}, []*PeerResult{at(64, 10000, time.Time{})}, "missed", "(1.16)"},
		{"one concurrency off", []*PeerResult{at(64, 10000, time.Time{}), at(256, 8000, time.Time{})}, []*PeerResult{at(64, 10000, time.Time{}), at(256, 10000, time.Time{})}, "missed", "(0.80)"},
		{"nothing alone at that concurrency", []*PeerResult{at(64, 10000, time.Time{})}, []*PeerResult{at(256, 10000, time.Time{})}, "not measured", notMeasured},
		{"what else ran, when read", []*PeerResult{withRest(at(64, 4000, time.Time{}), 3.2)}, []*PeerResult{withRest(at(64, 10000, time.Time{}), 0.08)},
			"missed", "concurrency 64: 4000 vs 10000 tasks/s alone (0.40), the rest of the machine 400 vs 10 µs per task"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Report{Peers: tt.peers, PeersAlone: tt.alone}
			ts := Evaluate(r)
			got := ts[len(ts)-1]
			require.Equal(t, "asynq's no-op worker in make bench vs the same run alone, minutes apart", got.Figure)
			require.Equal(t, tt.status, got.Status(), got.Value)
			require.Contains(t, got.Value, tt.value)
		})
	}
	require.Len(t, Evaluate(Report{Peers: []*PeerResult{at(64, 1, time.Time{})}}), 10, "no peer alone, no comparison")
}
