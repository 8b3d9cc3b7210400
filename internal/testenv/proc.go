package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BuildCommands builds the given packages (e.g. "../../cmd/api") into a
// new temporary directory and returns it, for a TestMain that runs the
// real binaries. The caller removes the directory.
func BuildCommands(prefix string, pkgs ...string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(context.Background(), "go", append([]string{"build", "-o", dir + string(os.PathSeparator)}, pkgs...)...) //nolint:gosec // tests build the project's own commands
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("build %s: %w", strings.Join(pkgs, " "), err)
	}
	return dir, nil
}

// RunCommand runs a binary to completion with env and returns its exit
// code and combined output.
func RunCommand(t testing.TB, bin string, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...) //nolint:gosec // tests run the binaries they just built
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatalf("testenv: run %s: %v", filepath.Base(bin), err)
	}
	return 0, string(out)
}

// Proc is a program a test runs in the background, with its output kept.
// It is killed when the test ends, and its last lines are logged if the
// test failed.
type Proc struct {
	Name string
	cmd  *exec.Cmd
	out  SyncBuffer
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done is closed
}

// StartProc starts bin with env as a process called name.
func StartProc(t testing.TB, name, bin string, env []string) *Proc {
	t.Helper()
	// Not tied to a context: the test's cleanup kills it, and Term must be
	// able to send SIGTERM first.
	p := &Proc{Name: name, cmd: exec.CommandContext(context.Background(), bin), done: make(chan struct{})} //nolint:gosec // tests run the binaries they just built
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("testenv: start %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("--- %s output (last lines):\n%s", name, Tail(p.Output(), 60))
		}
	})
	return p
}

// Memory is the process's resident memory now (VmRSS) and at its peak so
// far (VmHWM), in bytes, from /proc/PID/status: what the kernel counts
// against a container's memory limit, heap, stacks and runtime alike.
func (p *Proc) Memory(t testing.TB) (rss, peak int64) {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("testenv: memory of %s: %v", p.Name, err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		var kb int64
		if _, err := fmt.Sscanf(line, "VmRSS: %d kB", &kb); err == nil {
			rss = kb << 10
		}
		if _, err := fmt.Sscanf(line, "VmHWM: %d kB", &kb); err == nil {
			peak = kb << 10
		}
	}
	if rss == 0 || peak == 0 {
		t.Fatalf("testenv: memory of %s: no VmRSS or VmHWM in /proc/%d/status", p.Name, p.cmd.Process.Pid)
	}
	return rss, peak
}

// Output is everything the process has written so far.
func (p *Proc) Output() string { return p.out.String() }

// Count is how many output lines contain substr.
func (p *Proc) Count(substr string) int {
	n := 0
	for _, l := range strings.Split(p.Output(), "\n") {
		if strings.Contains(l, substr) {
			n++
		}
	}
	return n
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Term sends SIGTERM and requires a clean exit (status 0) within 45 s: a
// graceful stop.
func (p *Proc) Term(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("testenv: SIGTERM %s: %v", p.Name, err)
	}
	select {
	case <-p.done:
		if p.err != nil {
			t.Fatalf("%s did not exit 0 on SIGTERM (%v):\n%s", p.Name, p.err, Tail(p.Output(), 40))
		}
	case <-time.After(45 * time.Second):
		t.Fatalf("%s did not stop within 45s of SIGTERM", p.Name)
	}
}

// Kill is a crash: SIGKILL, no chance to ack or clean up.
func (p *Proc) Kill(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatalf("testenv: SIGKILL %s: %v", p.Name, err)
	}
	<-p.done
}

// Tail is the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// FreeAddr returns a 127.0.0.1 address with a port nothing listens on now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: free port: %v", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// SyncBuffer is a bytes.Buffer that a writer (a process, a logger, a
// provider) and a test reading it can share. Sync makes it a
// zapcore.WriteSyncer.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Sync is a no-op: everything is in memory already.
func (b *SyncBuffer) Sync() error { return nil }
