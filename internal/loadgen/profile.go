package loadgen

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"
)

// profiling captures CPU profiles of the api and consumer binaries (through
// their PPROF_ADDR) and of this process, once per kind, into Dir.
type profiling struct {
	dir  string
	done map[string]bool
}

func (o *Options) profiler() *profiling {
	if o.ProfileDir == "" {
		return nil
	}
	if o.prof == nil {
		o.prof = &profiling{dir: o.ProfileDir, done: map[string]bool{}}
	}
	return o.prof
}

// addr returns a PPROF_ADDR for a process, or "" when not profiling.
func (p *profiling) addr() string {
	if p == nil {
		return ""
	}
	a, err := freeAddr()
	if err != nil {
		return ""
	}
	return a
}

// fetch starts a CPU profile of seconds from a process's pprof server
// into dir/name.pprof (only the first time name is asked for); the
// returned wait blocks until it is written. A failure is reported, not
// fatal: the measurement stands without it.
func (p *profiling) fetch(ctx context.Context, addr, name string, d time.Duration, progress func(string, ...any)) (wait func()) {
	if p == nil || addr == "" || p.done[name] {
		return func() {}
	}
	p.done[name] = true
	secs := max(int(d/time.Second), 1)
	path := filepath.Join(p.dir, name+".pprof")
	res := make(chan error, 1)
	go func() {
		res <- func() error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), nil)
			if err != nil {
				return err
			}
			resp, err := (&http.Client{Timeout: time.Duration(secs+30) * time.Second}).Do(req)
			if err != nil {
				return err
			}
			defer func() { _ = resp.Body.Close() }()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("status %d (does this binary serve PPROF_ADDR?)", resp.StatusCode)
			}
			f, err := os.Create(path)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, resp.Body); err != nil {
				_ = f.Close()
				return err
			}
			return f.Close()
		}()
	}()
	return func() {
		if err := <-res; err != nil {
			progress("profile %s: %v", name, err)
		} else {
			progress("profile %s: %s (go tool pprof -top %s)", name, path, path)
		}
	}
}

// self profiles this process (the in-process no-op consumer) until stop.
func (p *profiling) self(name string, progress func(string, ...any)) (stop func()) {
	if p == nil || p.done[name] {
		return func() {}
	}
	p.done[name] = true
	path := filepath.Join(p.dir, name+".pprof")
	f, err := os.Create(path)
	if err != nil {
		progress("profile %s: %v", name, err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		progress("profile %s: %v", name, err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
		progress("profile %s: %s (this process: includes loadgen's own work)", name, path)
	}
}
