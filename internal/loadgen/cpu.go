package loadgen

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/msgpulse/msgpulse/internal/mgmt"
	"github.com/msgpulse/msgpulse/internal/rdb"
)

// CPU time from Linux's /proc. On a machine whose speed moves twofold
// between hours (docs/performance.md), msg/s compares two systems only when
// both ran in the same conditions; the CPU time each process spent per
// message holds better, and the rest of the machine's CPU over the same
// run says what else was running.

// userHZ is the unit of the times in /proc/<pid>/stat and /proc/stat:
// USER_HZ, which the kernel fixes at 100 for every user-space ABI.
const userHZ = 100

// Process roles: the CPU table's columns.
const (
	RoleAPI      = "api"
	RoleRawPath  = "raw path server"
	RoleConsumer = "consumer"
	RoleRabbitMQ = "RabbitMQ"
	RoleRedis    = "Redis"
	RoleLoadgen  = "load generator"
	RolePeer     = "asynq process"
)

// CPU is the CPU time (user + system) processes used during one timed
// run, and what the whole machine used meanwhile.
type CPU struct {
	Messages int     `json:"messages"`
	WallSec  float64 `json:"wallSec"`
	// Sec is each role's CPU seconds; a role whose process could not be
	// read (not on this machine, or gone) is absent.
	Sec map[string]float64 `json:"sec"`
	// MachineSec is every CPU's busy time over the run (/proc/stat), the
	// roles above included.
	MachineSec float64 `json:"machineSec"`
	// Before is how busy the machine was when the run began.
	Before *Quiet `json:"before,omitempty"`
}

// PerMessageUs is a role's CPU microseconds per message; false when the
// role was not measured.
func (c *CPU) PerMessageUs(role string) (float64, bool) {
	s, ok := c.Sec[role]
	if !ok || c.Messages <= 0 {
		return 0, false
	}
	return s / float64(c.Messages) * 1e6, true
}

// RestSec is the machine's CPU over the run that none of the roles used:
// other processes, the kernel's own work, anything else running.
func (c *CPU) RestSec() float64 {
	rest := c.MachineSec
	for _, s := range c.Sec {
		rest -= s
	}
	return max(rest, 0)
}

// procStat is one process's cumulative CPU ticks and name.
type procStat struct {
	comm  string
	ticks int64
}

// parseProcStat reads /proc/<pid>/stat's line: the name in parentheses
// (which may itself hold spaces and parentheses), then utime and stime,
// the 14th and 15th fields.
func parseProcStat(line string) (procStat, error) {
	open, end := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("stat %q: no (comm)", line)
	}
	f := strings.Fields(line[end+1:])
	// After the name: state (3), ppid (4), ... utime (14), stime (15).
	if len(f) < 13 {
		return procStat{}, fmt.Errorf("stat %q: %d fields after comm", line, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return procStat{}, fmt.Errorf("stat %q: %w", line, err)
	}
	return procStat{comm: line[open+1 : end], ticks: ut + st}, nil
}

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(string(b))
}

// parseMachineStat reads /proc/stat's first line ("cpu user nice system
// idle iowait irq softirq steal ..."): the busy ticks of all CPUs, and all
// ticks. Steal counts as busy: a virtual machine's host took the CPU.
func parseMachineStat(line string) (busy, total int64, err error) {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var v [8]int64
	for i := range v {
		if v[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("/proc/stat %q: %w", line, err)
		}
	}
	idle := v[3] + v[4] // idle, iowait
	busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
	return busy, busy + idle, nil
}

func readMachineStat() (busy, total int64, err error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = f.Close() }()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil {
		return 0, 0, err
	}
	return parseMachineStat(line)
}

// cpuMeter reads the CPU time of a run's processes at its start and end.
type cpuMeter struct {
	pids  map[string][]int
	start map[string]int64
	busy  int64
	t0    time.Time
}

// startCPU reads the ticks of each role's processes now. A role none of
// whose processes can be read is left out of the result.
func startCPU(pids map[string][]int) *cpuMeter {
	m := &cpuMeter{pids: pids, start: roleTicks(pids), t0: time.Now()}
	m.busy, _, _ = readMachineStat()
	return m
}

// stop reads them again and returns what the run used for messages.
func (m *cpuMeter) stop(messages int, before *Quiet) *CPU {
	end := roleTicks(m.pids)
	busy, _, _ := readMachineStat()
	c := &CPU{Messages: messages, WallSec: round2(time.Since(m.t0).Seconds()), Sec: map[string]float64{},
		MachineSec: float64(busy-m.busy) / userHZ, Before: before}
	for role, t := range end {
		if t0, ok := m.start[role]; ok {
			c.Sec[role] = float64(t-t0) / userHZ
		}
	}
	return c
}

// roleTicks sums each role's processes' ticks; a role is left out unless
// all its processes can be read.
func roleTicks(pids map[string][]int) map[string]int64 {
	out := map[string]int64{}
roles:
	for role, ps := range pids {
		var sum int64
		for _, pid := range ps {
			s, err := readProcStat(pid)
			if err != nil {
				continue roles
			}
			sum += s.ticks
		}
		if len(ps) > 0 {
			out[role] = sum
		}
	}
	return out
}

// infoField is a field of a Redis INFO answer ("" when absent).
func infoField(info, key string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+":"); ok {
			return v
		}
	}
	return ""
}

// local keeps pid when /proc shows a process of that pid whose name starts
// with comm: the service runs on this machine, not behind a port forward or
// in another machine's process table.
func local(pid int, comm string) bool {
	s, err := readProcStat(pid)
	return err == nil && strings.HasPrefix(s.comm, comm)
}

// servicePIDs finds the local processes of Redis (INFO's process_id) and
// of the broker's nodes (the management API's os_pid), for the CPU table.
// A service elsewhere is left out: its column says so.
func (o *Options) servicePIDs(ctx context.Context) map[string][]int {
	if o.services != nil {
		return o.services
	}
	o.services = map[string][]int{}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if rc, err := rdb.Open(o.RedisMode, o.RedisURL); err == nil {
		if info, err := rc.Info(ctx, "server").Result(); err == nil {
			if pid, err := strconv.Atoi(infoField(info, "process_id")); err == nil && local(pid, "redis-server") {
				o.services[RoleRedis] = []int{pid}
			}
		}
		_ = rc.Close()
	}
	if mc, err := mgmt.New(o.ManagementURL, 5*time.Second); err == nil {
		if nodes, err := mc.Nodes(ctx); err == nil {
			for _, n := range nodes {
				if pid, err := strconv.Atoi(n.OSPid); err == nil && local(pid, "beam") {
					o.services[RoleRabbitMQ] = append(o.services[RoleRabbitMQ], pid)
				}
			}
		}
	}
	return o.services
}

// runPIDs is the roles of a run: the services, this process, and the
// given processes.
func (o *Options) runPIDs(ctx context.Context, procs map[string]int) map[string][]int {
	pids := map[string][]int{RoleLoadgen: {os.Getpid()}}
	for role, ps := range o.servicePIDs(ctx) {
		pids[role] = ps
	}
	for role, pid := range procs {
		pids[role] = []int{pid}
	}
	return pids
}

// measured is a timed run whose CPU is being read.
type measured struct {
	meter  *cpuMeter
	before *Quiet
}

// quiet waits for a quiet machine (Options.QuietWait) before the timed run
// what, and says so when it was not, or when msgpulse processes this run
// did not start are running.
func (o *Options) quiet(ctx context.Context, what string) *Quiet {
	o.servicePIDs(ctx) // found now, not inside the timed run
	q := waitQuiet(ctx, o.QuietWait)
	if q != nil && !q.Quiet {
		o.progress("%s: the machine was %.0f%% busy after %.0fs of waiting for it to go quiet (busiest: %s)", what, q.Busy*100, q.WaitedSec, strings.Join(q.Others, ", "))
	}
	if q != nil && len(q.Strays) > 0 {
		o.progress("%s: msgpulse processes this run did not start are running: %s", what, strings.Join(q.Strays, ", "))
	}
	return q
}

// meter starts reading the CPU time of procs (role → pid: the processes
// the run times), of Redis, RabbitMQ and this process; before is what
// quiet found.
func (o *Options) meter(ctx context.Context, procs map[string]int, before *Quiet) *measured {
	return &measured{meter: startCPU(o.runPIDs(ctx, procs)), before: before}
}

// measure is quiet, then meter at once.
func (o *Options) measure(ctx context.Context, procs map[string]int, what string) *measured {
	return o.meter(ctx, procs, o.quiet(ctx, what))
}

// stop ends the reading: the CPU per message of messages. A nil measured
// (nothing was read) gives nil.
func (m *measured) stop(messages int) *CPU {
	if m == nil {
		return nil
	}
	return m.meter.stop(messages, m.before)
}

// Quiet is how busy the machine was just before a timed run began.
type Quiet struct {
	WaitedSec float64 `json:"waitedSec"`
	// Busy is the share of all CPUs that were busy over the last second
	// sampled (0-1).
	Busy float64 `json:"busy"`
	// Quiet says Busy fell to quietBusy or under before the wait ran out.
	Quiet bool `json:"quiet"`
	// Others are the busiest processes of that second, when it was not
	// quiet: what the run shared the machine with.
	Others []string `json:"others,omitempty"`
	// Strays are msgpulse processes the run did not start (another run's,
	// or left behind by one that was killed), busy or not.
	Strays []string `json:"strays,omitempty"`
}

// quietBusy is the share of the machine's CPUs that may be busy in the
// second before a timed run: an idle broker, Redis and load generator use
// a few percent of one core between them.
const quietBusy = 0.10

// waitQuiet samples the machine a second at a time until one second's
// busy share is at most quietBusy, or maxWait has passed; it returns the
// last sample, with the busiest processes when it was not quiet, and the
// msgpulse processes running that this one did not start. maxWait 0
// samples once and does not wait. Nothing a run has started should be
// working when it is called.
func waitQuiet(ctx context.Context, maxWait time.Duration) *Quiet {
	start := time.Now()
	for {
		procs0 := allProcStats()
		busy0, total0, err := readMachineStat()
		if err != nil || !pace(ctx, time.Second) {
			return nil
		}
		busy1, total1, err := readMachineStat()
		if err != nil {
			return nil
		}
		q := &Quiet{Busy: round2(float64(busy1-busy0) / float64(max(total1-total0, 1)))}
		q.Quiet = q.Busy <= quietBusy
		if q.Quiet || time.Since(start) >= maxWait {
			q.WaitedSec = round2(time.Since(start).Seconds())
			procs1 := allProcStats()
			if !q.Quiet {
				q.Others = busiest(procs0, procs1, 3)
			}
			q.Strays = strays(procs1, ownPIDs())
			return q
		}
	}
}

// allProcStats reads every process's stat.
func allProcStats() map[int]procStat {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make(map[int]procStat, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, err := readProcStat(pid); err == nil {
			out[pid] = s
		}
	}
	return out
}

// busiest names the n processes that used the most CPU between two
// readings, as "comm (pid) 0.42 s"; a process that started in between
// counts from zero.
func busiest(before, after map[int]procStat, n int) []string {
	type use struct {
		pid   int
		comm  string
		ticks int64
	}
	var us []use
	for pid, s := range after {
		d := s.ticks - before[pid].ticks
		if b, ok := before[pid]; ok && b.comm != s.comm {
			d = s.ticks // a pid reused by a new process
		}
		if d > 0 {
			us = append(us, use{pid, s.comm, d})
		}
	}
	sort.Slice(us, func(i, j int) bool {
		if us[i].ticks != us[j].ticks {
			return us[i].ticks > us[j].ticks
		}
		return us[i].pid < us[j].pid
	})
	var out []string
	for _, u := range us[:min(n, len(us))] {
		out = append(out, fmt.Sprintf("%s (%d) %.2f s", u.comm, u.pid, float64(u.ticks)/userHZ))
	}
	return out
}

// cpuSummary is a run's CPU per message over its rounds: each role's
// median, the rest of the machine's and the machine's.
type cpuSummary struct {
	Rounds    int
	Rate      float64 // messages per second of wall time over the readings
	PerMsgUs  map[string]float64
	RestUs    float64
	MachineUs float64
	// NotQuiet counts the rounds that began on a busy machine.
	NotQuiet int
	Others   []string // what was running then, from the first such round
}

// summarizeCPU takes the medians of rounds' CPU per message; nil rounds are
// skipped.
func summarizeCPU(rounds []*CPU) (cpuSummary, bool) {
	s := cpuSummary{PerMsgUs: map[string]float64{}}
	per := map[string][]float64{}
	var rest, mach, rate []float64
	for _, c := range rounds {
		if c == nil || c.Messages <= 0 {
			continue
		}
		s.Rounds++
		if c.WallSec > 0 {
			rate = append(rate, float64(c.Messages)/c.WallSec)
		}
		for role := range c.Sec {
			v, _ := c.PerMessageUs(role)
			per[role] = append(per[role], v)
		}
		rest = append(rest, c.RestSec()/float64(c.Messages)*1e6)
		mach = append(mach, c.MachineSec/float64(c.Messages)*1e6)
		if c.Before != nil && !c.Before.Quiet {
			s.NotQuiet++
			if s.Others == nil {
				s.Others = c.Before.Others
			}
		}
	}
	for role, vs := range per {
		s.PerMsgUs[role] = round2(median(vs))
	}
	s.RestUs, s.MachineUs, s.Rate = round2(median(rest)), round2(median(mach)), round2(median(rate))
	return s, s.Rounds > 0
}

// msgpulseNames are the process names of msgpulse's binaries and of the
// load generator's peer.
var msgpulseNames = map[string]bool{"api": true, "consumer": true, "dlq": true, "loadgen": true, "asynq-noop": true}

// strays lists the processes named like msgpulse's binaries that are not in
// ours, as "comm (pid)".
func strays(procs map[int]procStat, ours map[int]bool) []string {
	var pids []int
	for pid, s := range procs {
		if msgpulseNames[s.comm] && !ours[pid] {
			pids = append(pids, pid)
		}
	}
	sort.Ints(pids)
	out := make([]string, len(pids))
	for i, pid := range pids {
		out[i] = fmt.Sprintf("%s (%d)", procs[pid].comm, pid)
	}
	return out
}

// cpuRow is one line of the CPU table: a timed run and the process it
// timed.
type cpuRow struct {
	Name string
	Rate float64 // messages/s, the run's median
	Role string  // the process timed: its column is "the process"
	// Broker says RabbitMQ takes part in the run, so it counts in the
	// system's column (the peer uses none: what RabbitMQ did meanwhile is
	// someone else's).
	Broker bool
	Sum    cpuSummary
}

// cpuRoles are the table's columns after the timed process, in order.
var cpuRoles = []string{RoleRabbitMQ, RoleRedis, RoleLoadgen}

// cpuRows are the runs of a report whose CPU time was read: the api's and
// the raw path's max phases, the consumer binary's runs, the peer's (in
// the run and alone) and its enqueues.
func cpuRows(r Report) []cpuRow {
	var rows []cpuRow
	add := func(name string, rate float64, role string, rounds []*CPU) {
		if s, ok := summarizeCPU(rounds); ok {
			if rate <= 0 {
				rate = s.Rate
			}
			rows = append(rows, cpuRow{Name: name, Rate: rate, Role: role, Broker: role != RolePeer, Sum: s})
		}
	}
	if a := r.API; a != nil {
		var mx, base []*CPU
		for _, rd := range a.Rounds {
			mx, base = append(mx, rd.MaxCPU), append(base, rd.BaselineCPU)
		}
		add("api, max, per accepted request", a.Median.MaxRPS, RoleAPI, mx)
		add("raw path (echo + one Lua call + one confirmed publish), max", a.Median.BaselineRPS, RoleRawPath, base)
	}
	if c := r.Consumer; c != nil {
		var bin, wide, smtp []*CPU
		for _, rd := range c.Rounds {
			bin, wide, smtp = append(bin, rd.BinaryCPU), append(wide, rd.BinaryWideCPU), append(smtp, rd.SMTPCPU)
		}
		add(fmt.Sprintf("consumer binary, SMS log provider, CONCURRENCY=%d", c.Concurrency), c.Median.Binary, RoleConsumer, bin)
		add(fmt.Sprintf("consumer binary, SMS log provider, CONCURRENCY=%d", c.WideConcurrency), c.Median.BinaryWide, RoleConsumer, wide)
		add(fmt.Sprintf("consumer binary, SMTP sink (in the load generator), CONCURRENCY=%d", c.Concurrency), c.Median.SMTP, RoleConsumer, smtp)
	}
	for _, set := range []struct {
		where string
		ps    []*PeerResult
	}{{"", r.Peers}, {", alone", r.PeersAlone}} {
		var enq []*CPU
		for _, p := range set.ps {
			add(fmt.Sprintf("%s no-op worker, concurrency %d%s", p.Tool, p.Concurrency, set.where), p.Median, RolePeer, p.CPU)
			enq = append(enq, p.EnqueueCPU...)
		}
		if len(set.ps) > 0 {
			add(fmt.Sprintf("%s client, Enqueue one task at a time%s", set.ps[0].Tool, set.where), 0, RolePeer, enq)
		}
	}
	return rows
}

// cells are the row's figures, µs per message, in the table's order: the
// timed process, cpuRoles, the system (the process with Redis, and with
// RabbitMQ where it takes part), the rest of the machine; "-" for what was
// not read.
func (row cpuRow) cells() []string {
	us := func(v float64, ok bool) string {
		if !ok {
			return "-"
		}
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	get := func(role string) (float64, bool) { v, ok := row.Sum.PerMsgUs[role]; return v, ok }
	out := []string{us(get(row.Role))}
	for _, role := range cpuRoles {
		out = append(out, us(get(role)))
	}
	own, ok1 := get(row.Role)
	rd, ok2 := get(RoleRedis)
	mq, ok3 := get(RoleRabbitMQ)
	if !row.Broker {
		mq, ok3 = 0, true
	}
	out = append(out, us(own+rd+mq, ok1 && ok2 && ok3), us(row.Sum.RestUs, true))
	return out
}
