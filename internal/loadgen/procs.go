package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Binaries are the msgpulse programs a run starts: the real api and
// consumer, so what is measured is what ships.
type Binaries struct {
	Dir     string // holds api and consumer (and loadgen when built here)
	LogDir  string // each process's output, kept for a failed run
	cleanup func()
}

// Close removes what Build created.
func (b *Binaries) Close() {
	if b != nil && b.cleanup != nil {
		b.cleanup()
	}
}

// Build compiles ./cmd/api, ./cmd/consumer and ./cmd/loadgen once into a
// temporary directory, or, when dir is set, uses the binaries found there.
func Build(ctx context.Context, dir string) (*Binaries, error) {
	logs, err := os.MkdirTemp("", "loadgen-logs-")
	if err != nil {
		return nil, err
	}
	if dir != "" {
		for _, n := range []string{"api", "consumer"} {
			if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
				return nil, fmt.Errorf("--bin-dir %s: %w (build them with `go build -o %s ./cmd/api ./cmd/consumer`)", dir, err, dir)
			}
		}
		return &Binaries{Dir: dir, LogDir: logs, cleanup: func() { _ = os.RemoveAll(logs) }}, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return nil, fmt.Errorf("%w; or pass --bin-dir with prebuilt api and consumer", err)
	}
	tmp, err := os.MkdirTemp("", "loadgen-bin-")
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp+string(os.PathSeparator), "./cmd/api", "./cmd/consumer", "./cmd/loadgen")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(tmp)
		return nil, fmt.Errorf("go build in %s: %w\n%s", root, err, out)
	}
	return &Binaries{Dir: tmp, LogDir: logs, cleanup: func() { _ = os.RemoveAll(tmp); _ = os.RemoveAll(logs) }}, nil
}

// moduleRoot finds msgpulse's go.mod from the working directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module github.com/msgpulse/msgpulse\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the msgpulse source tree, so api and consumer cannot be built")
		}
		dir = parent
	}
}

// Proc is a running msgpulse process.
type Proc struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	logFile *os.File
	done    chan struct{}
	err     error
}

// Start runs path with exactly env (plus PATH), its output to a log file.
func Start(name, path string, args, env []string, logDir string) (*Proc, error) {
	logPath := filepath.Join(logDir, fmt.Sprintf("%s-%d.log", name, time.Now().UnixNano()))
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, LogPath: logPath, cmd: cmd, logFile: f, done: make(chan struct{})}
	pid := cmd.Process.Pid
	children.Store(pid, true)
	go func() { p.err = cmd.Wait(); children.Delete(pid); _ = f.Close(); close(p.done) }()
	return p, nil
}

// children holds the pids of the processes Start started that are still
// running: a measurement's own, not strays (cpu.go).
var children sync.Map

// ownPIDs is this process and the running processes it started.
func ownPIDs() map[int]bool {
	ours := map[int]bool{os.Getpid(): true}
	children.Range(func(k, _ any) bool { ours[k.(int)] = true; return true })
	return ours
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended, and how.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM and waits up to timeout, then kills.
func (p *Proc) Stop(timeout time.Duration) error {
	if exited, err := p.Exited(); exited {
		return err
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return p.err
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within %s of SIGTERM (killed)", p.Name, timeout)
	}
}

// Tail returns the last n lines of the process's output.
func (p *Proc) Tail(n int) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// LogContains reports whether the output so far contains s.
func (p *Proc) LogContains(s string) bool {
	b, err := os.ReadFile(p.LogPath)
	return err == nil && bytes.Contains(b, []byte(s))
}

// Mem is a process's resident memory in MB.
type Mem struct {
	PeakRSSMB float64 `json:"peakRssMb"` // highest VmRSS sampled while under load
	HWMMB     float64 `json:"hwmMb"`     // VmHWM at the end: the kernel's lifetime peak
}

// Peak is the larger of the two: what the RSS target is checked against.
func (m Mem) Peak() float64 { return max(m.PeakRSSMB, m.HWMMB) }

// readMem reads VmRSS and VmHWM (kB) from /proc/<pid>/status.
func readMem(pid int) (rss, hwm int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = f.Close() }()
	return parseMem(f)
}

func parseMem(r io.Reader) (rss, hwm int64, err error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, perr := strconv.ParseInt(f[0], 10, 64)
		if perr != nil {
			continue
		}
		switch k {
		case "VmRSS":
			rss = n
		case "VmHWM":
			hwm = n
		}
	}
	return rss, hwm, sc.Err()
}

// RSSSampler samples a process's VmRSS until stopped.
type RSSSampler struct {
	pid    int
	stop   context.CancelFunc
	wg     sync.WaitGroup
	peakKB int64
}

// SampleRSS starts sampling pid every 100 ms.
func SampleRSS(ctx context.Context, pid int) *RSSSampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &RSSSampler{pid: pid, stop: cancel}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if rss, _, err := readMem(pid); err == nil {
				s.peakKB = max(s.peakKB, rss)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// Stop ends sampling and returns the peak with the current VmHWM.
func (s *RSSSampler) Stop() Mem {
	s.stop()
	s.wg.Wait()
	_, hwm, _ := readMem(s.pid)
	return Mem{PeakRSSMB: round2(float64(s.peakKB) / 1024), HWMMB: round2(float64(hwm) / 1024)}
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// exitError describes an ended process, with the end of its output.
func (p *Proc) exitError() error {
	if _, err := p.Exited(); err != nil {
		return fmt.Errorf("%s exited: %w\n%s", p.Name, err, p.Tail(20))
	}
	return fmt.Errorf("%s exited with status 0:\n%s", p.Name, p.Tail(20))
}
