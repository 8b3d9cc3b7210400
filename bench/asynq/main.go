// Command asynq-noop measures hibiken/asynq's no-op worker on this
// machine, for `make bench` to print next to msgpulse's consumer: the task
// queue a Go user would pick instead. It is a module of its own so that
// msgpulse never depends on asynq.
//
// Each round enqueues -tasks no-op tasks into a queue of its own (a unique
// name), then starts a server with -concurrency workers and times how long
// they take to process all of them, from the server's start to the last
// task done. It deletes its queue afterwards. It prints JSON (-json) or a
// line per round, and the median.
//
// It runs in a Redis database of its own (-db, 15 by default), never in
// the database tests and msgpulse share: before the first round it deletes
// what an interrupted run of its own left there (its bench-noop queues, and
// nothing else), and it reports how many keys that are not asynq's the
// database held (otherKeys), so a database that is not its own shows in
// the result.
//
// With -sync it says `sync <event> <round>` on stdout before enqueueing
// (enqueue), before the timed part (start) and after it (end), and waits
// for a line on stdin each time: `loadgen peer` reads the CPU time of this
// process and of Redis from /proc then, and waits for a quiet machine
// before answering start.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// asynqVersion is the version go.mod requires (asynq exports none).
const asynqVersion = "v0.26.0"

type result struct {
	Tool        string    `json:"tool"`
	Version     string    `json:"version"`
	Tasks       int       `json:"tasks"`
	Concurrency int       `json:"concurrency"`
	Rounds      []float64 `json:"roundsPerSec"`
	Median      float64   `json:"medianPerSec"`
	DB          int       `json:"db"`
	// OtherKeys is how many keys the database held before the first round
	// that were not asynq's: 0 when it had a database of its own.
	OtherKeys int64 `json:"otherKeys"`
}

// queuePrefix starts every queue this tool creates, so that it can find
// what an interrupted run left behind and delete only that.
const queuePrefix = "bench-noop-"

func main() {
	var (
		addr        = flag.String("redis", "127.0.0.1:6379", "Redis address")
		db          = flag.Int("db", 15, "Redis database, one of its own (not the one tests and msgpulse share)")
		tasks       = flag.Int("tasks", 8000, "tasks per round")
		concurrency = flag.Int("concurrency", 64, "asynq server concurrency (workers)")
		rounds      = flag.Int("rounds", 3, "rounds (the median is reported)")
		asJSON      = flag.Bool("json", false, "print the result as JSON")
		timeout     = flag.Duration("timeout", 2*time.Minute, "longest a round may take")
		syncFlag    = flag.Bool("sync", false, "say `sync <event> <round>` on stdout before enqueueing, before and after the timed part, and wait for a line on stdin each time (loadgen peer)")
	)
	flag.Parse()
	opt := asynq.RedisClientOpt{Addr: *addr, DB: *db}
	res := result{Tool: "hibiken/asynq", Version: asynqVersion, Tasks: *tasks, Concurrency: *concurrency, DB: *db}
	var err error
	if res.OtherKeys, err = clean(opt); err != nil {
		log.Fatalf("asynq-noop: %v", err)
	}
	if res.OtherKeys > 0 {
		log.Printf("asynq-noop: Redis database %d holds %d keys that are not asynq's: it is not a database of its own (-db)", *db, res.OtherKeys)
	}
	var say sayer
	if *syncFlag {
		say = newSayer(os.Stdout, os.Stdin)
	}
	for r := 1; r <= *rounds; r++ {
		rate, err := round(opt, *tasks, *concurrency, *timeout, func(event string) error { return say.say(event, r) })
		if err != nil {
			log.Fatalf("asynq-noop: round %d: %v", r, err)
		}
		res.Rounds = append(res.Rounds, rate)
		if !*asJSON {
			fmt.Printf("round %d: %.0f tasks/s (%d tasks, concurrency %d)\n", r, rate, *tasks, *concurrency)
		}
	}
	res.Median = median(res.Rounds)
	if *asJSON {
		_ = json.NewEncoder(os.Stdout).Encode(res)
		return
	}
	fmt.Printf("asynq %s no-op worker: median %.0f tasks/s\n", res.Version, res.Median)
}

// sayer tells a driving process where a round is and waits for its
// answer (-sync); the zero sayer does nothing.
type sayer struct {
	out io.Writer
	in  *bufio.Reader
}

func newSayer(out io.Writer, in io.Reader) sayer { return sayer{out: out, in: bufio.NewReader(in)} }

func (s sayer) say(event string, round int) error {
	if s.out == nil {
		return nil
	}
	if _, err := fmt.Fprintf(s.out, "sync %s %d\n", event, round); err != nil {
		return err
	}
	if _, err := s.in.ReadString('\n'); err != nil {
		return fmt.Errorf("sync %s: no answer on stdin: %w", event, err)
	}
	return nil
}

// round enqueues tasks and times the server processing them; say marks
// the enqueue and the timed part's start and end.
func round(opt asynq.RedisClientOpt, tasks, concurrency int, timeout time.Duration, say func(event string) error) (float64, error) {
	queue := fmt.Sprintf("%s%d-%d", queuePrefix, os.Getpid(), time.Now().UnixNano())
	client := asynq.NewClient(opt)
	defer client.Close()
	inspector := asynq.NewInspector(opt)
	defer inspector.Close()
	defer func() {
		_ = inspector.DeleteQueue(queue, true)
		forget(opt, queue) // DeleteQueue leaves the queue's daily stats behind
	}()

	// Enqueue before the server starts, as the consumer benchmark prefills
	// its queue: what is timed is the workers draining it.
	if err := say("enqueue"); err != nil {
		return 0, err
	}
	for i := range tasks {
		if _, err := client.Enqueue(asynq.NewTask("noop", nil), asynq.Queue(queue), asynq.MaxRetry(0), asynq.Retention(0)); err != nil {
			return 0, fmt.Errorf("enqueue %d: %w", i, err)
		}
	}
	var done atomic.Int64
	finished := make(chan struct{})
	mux := asynq.NewServeMux()
	mux.HandleFunc("noop", func(context.Context, *asynq.Task) error {
		if done.Add(1) == int64(tasks) {
			close(finished)
		}
		return nil
	})
	srv := asynq.NewServer(opt, asynq.Config{
		Concurrency: concurrency,
		Queues:      map[string]int{queue: 1},
		LogLevel:    asynq.WarnLevel,
	})
	if err := say("start"); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := srv.Start(mux); err != nil {
		return 0, err
	}
	defer srv.Shutdown()
	select {
	case <-finished:
	case <-time.After(timeout):
		return 0, errors.New("timed out: " + fmt.Sprint(done.Load(), " of ", tasks, " done"))
	}
	elapsed := time.Since(start)
	if err := say("end"); err != nil {
		return 0, err
	}
	return float64(tasks) / elapsed.Seconds(), nil
}

// clean deletes what interrupted runs of this tool left in its database
// (their queues, found by queuePrefix) and returns how many keys it holds
// that are not asynq's: another user's.
func clean(opt asynq.RedisClientOpt) (int64, error) {
	rc := redis.NewClient(&redis.Options{Addr: opt.Addr, DB: opt.DB})
	defer rc.Close()
	ctx := context.Background()
	queues, err := rc.SMembers(ctx, "asynq:queues").Result()
	if err != nil {
		return 0, fmt.Errorf("redis %s db %d: %w", opt.Addr, opt.DB, err)
	}
	inspector := asynq.NewInspector(opt)
	defer inspector.Close()
	for _, q := range queues {
		if strings.HasPrefix(q, queuePrefix) {
			_ = inspector.DeleteQueue(q, true)
			forget(opt, q)
		}
	}
	var others int64
	iter := rc.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		if !strings.HasPrefix(iter.Val(), "asynq:") {
			others++
		}
	}
	return others, iter.Err()
}

// forget deletes every key asynq keeps for queue (they share its hash tag).
func forget(opt asynq.RedisClientOpt, queue string) {
	rc := redis.NewClient(&redis.Options{Addr: opt.Addr, DB: opt.DB})
	defer rc.Close()
	ctx := context.Background()
	iter := rc.Scan(ctx, 0, "asynq:{"+queue+"}:*", 1000).Iterator()
	for iter.Next(ctx) {
		rc.Del(ctx, iter.Val())
	}
	rc.SRem(ctx, "asynq:queues", queue)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
