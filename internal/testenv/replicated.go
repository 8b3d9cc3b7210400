package testenv

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Replicated is a Redis master and its replica, each a redis-server of the
// test's own on a free port, in a temporary directory, with no
// persistence. Both are killed when the test ends, failed or not.
type Replicated struct {
	MasterAddr, ReplicaAddr string
	// Master is a client of the master (closed when the test ends).
	Master  *redis.Client
	replica *exec.Cmd
	link    *FaultProxy // the replica's link to the master, with ViaProxy
}

// ReplicatedOptions adds server settings to the master's command line
// (e.g. "min-replicas-to-write", "1").
type ReplicatedOptions struct {
	MasterArgs []string
	// ViaProxy makes the replica reach the master through a FaultProxy,
	// so that Partition can cut the two apart while both stay up.
	ViaProxy bool
}

// NewReplicated starts a master and a replica and waits until the master
// counts the replica online. It skips the test when redis-server is not
// installed, or under -short.
func NewReplicated(t testing.TB, o ReplicatedOptions) *Replicated {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: starts redis-server (run without -short)")
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed")
	}
	r := &Replicated{MasterAddr: FreeAddr(t), ReplicaAddr: FreeAddr(t)}
	startRedis(t, bin, r.MasterAddr, o.MasterArgs...)
	host, port, _ := net.SplitHostPort(r.MasterAddr)
	if o.ViaProxy {
		r.link = NewFaultProxy(t, r.MasterAddr)
		host, port, _ = net.SplitHostPort(r.link.Addr())
	}
	r.replica = startRedis(t, bin, r.ReplicaAddr, "--replicaof", host, port)
	r.Master = redis.NewClient(&redis.Options{Addr: r.MasterAddr, Protocol: 2})
	t.Cleanup(func() { _ = r.Master.Close() })
	WaitFor(t, 10*time.Second, "the replica comes online on the master", func() bool { return r.OnlineReplicas(t) == 1 })
	// Online is not yet acknowledging: a replica fresh from its full sync
	// gets the command stream only after its first ACK, which may come a
	// second later.
	WaitFor(t, 10*time.Second, "the replica acknowledges writes", func() bool { return r.acks() })
	return r
}

// acks reports whether the replica acknowledges a write within 100ms.
func (r *Replicated) acks() bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	p := r.Master.Pipeline() // one connection: WAIT counts its own writes
	p.Set(ctx, "testenv:acks", "1", time.Minute)
	wait := p.Do(ctx, "WAIT", 1, 100)
	_, _ = p.Exec(ctx)
	n, err := wait.Int()
	return err == nil && n == 1
}

// startRedis runs redis-server on addr with args, in a directory of the
// test's, killed when the test ends.
func startRedis(t testing.TB, bin, addr string, args ...string) *exec.Cmd {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	argv := append([]string{"--bind", host, "--port", port, "--dir", t.TempDir(), "--save", "", "--appendonly", "no",
		"--protected-mode", "no", "--logfile", "", "--repl-diskless-sync-delay", "0"}, args...)
	cmd := exec.CommandContext(context.Background(), bin, argv...) //nolint:gosec // the test's own redis-server
	var out SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("testenv: start redis-server on %s: %v", addr, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		// SIGKILL ends a process that a failed test left stopped, too.
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("--- redis-server %s (last lines):\n%s", addr, Tail(out.String(), 20))
		}
	})
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer func() { _ = c.Close() }()
	WaitFor(t, 10*time.Second, "redis-server answers on "+addr, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return c.Ping(ctx).Err() == nil
	})
	return cmd
}

// StopReplica freezes the replica (SIGSTOP): its TCP connection stays up
// and the master gets no acknowledgements, as in a network partition.
func (r *Replicated) StopReplica(t testing.TB) {
	t.Helper()
	if err := r.replica.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("testenv: SIGSTOP the replica: %v", err)
	}
}

// ResumeReplica ends StopReplica (SIGCONT): the replica catches up.
func (r *Replicated) ResumeReplica(t testing.TB) {
	t.Helper()
	if err := r.replica.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("testenv: SIGCONT the replica: %v", err)
	}
}

// OnlineReplicas is how many replicas the master lists online (ROLE).
func (r *Replicated) OnlineReplicas(t testing.TB) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	v, err := r.Master.Do(ctx, "ROLE").Slice()
	if err != nil || len(v) < 3 {
		return -1
	}
	rs, _ := v[2].([]any)
	return len(rs)
}

// URL is a redis:// URL of the master, database 0.
func (r *Replicated) URL() string { return fmt.Sprintf("redis://%s/0", r.MasterAddr) }

// Info is one field of the master's INFO replication, "" when absent.
func (r *Replicated) Info(t testing.TB, field string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s, err := r.Master.Info(ctx, "replication").Result()
	if err != nil {
		t.Fatalf("testenv: INFO replication: %v", err)
	}
	for _, line := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}

// KillReplica ends the replica for good (SIGKILL): the master sees its
// connection close and stops counting it.
func (r *Replicated) KillReplica(t testing.TB) {
	t.Helper()
	_ = r.replica.Process.Signal(syscall.SIGCONT)
	if err := r.replica.Process.Kill(); err != nil {
		t.Fatalf("testenv: SIGKILL the replica: %v", err)
	}
}

// Replica is a client of the replica (closed when the test ends).
func (r *Replicated) Replica(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.ReplicaAddr, Protocol: 2})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Partition stops all traffic between the master and the replica (a
// NewReplicated with ViaProxy): both stay up, the master keeps the
// replica's connection and gets no acknowledgements, and clients still
// reach both, as in issue 46's partition.
func (r *Replicated) Partition(t testing.TB) {
	t.Helper()
	if r.link == nil {
		t.Fatal("testenv: Partition needs ReplicatedOptions.ViaProxy")
	}
	r.link.Blackhole()
}

// Failover promotes the replica (REPLICAOF NO ONE), as Sentinel does on
// its side of a partition.
func (r *Replicated) Failover(t testing.TB) {
	t.Helper()
	c := r.Replica(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatalf("testenv: promote the replica: %v", err)
	}
}

// Rejoin heals a Partition after a Failover: the old master becomes a
// replica of the new one and, in its full resync, discards every write it
// took since the partition. It returns once the old master is in sync.
func (r *Replicated) Rejoin(t testing.TB) {
	t.Helper()
	r.link.Cut()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	host, port, _ := net.SplitHostPort(r.ReplicaAddr)
	if err := r.Master.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		t.Fatalf("testenv: make the old master a replica: %v", err)
	}
	WaitFor(t, 10*time.Second, "the old master resyncs from the new one", func() bool {
		return r.Info(t, "role") == "slave" && r.Info(t, "master_link_status") == "up"
	})
}
