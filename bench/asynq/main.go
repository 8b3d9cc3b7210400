// Command asynq-noop measures hibiken/asynq's no-op worker on this
// machine, for `make bench` to print next to msgpulse's consumer: the task
// queue a Go user would pick instead. It is a module of its own so that
// msgpulse never depends on asynq.
//
// Each round enqueues -tasks no-op tasks into a queue of its own (a unique
// name, so it never touches another user's queues on a shared Redis), then
// starts a server with -concurrency workers and times how long they take
// to process all of them, from the server's start to the last task done.
// It deletes its queue afterwards. It prints JSON (-json) or a line per
// round, and the median.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"sort"
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
}

func main() {
	var (
		addr        = flag.String("redis", "127.0.0.1:6379", "Redis address")
		db          = flag.Int("db", 0, "Redis database")
		tasks       = flag.Int("tasks", 8000, "tasks per round")
		concurrency = flag.Int("concurrency", 64, "asynq server concurrency (workers)")
		rounds      = flag.Int("rounds", 3, "rounds (the median is reported)")
		asJSON      = flag.Bool("json", false, "print the result as JSON")
		timeout     = flag.Duration("timeout", 2*time.Minute, "longest a round may take")
	)
	flag.Parse()
	res := result{Tool: "hibiken/asynq", Version: asynqVersion, Tasks: *tasks, Concurrency: *concurrency}
	for r := 1; r <= *rounds; r++ {
		rate, err := round(asynq.RedisClientOpt{Addr: *addr, DB: *db}, *tasks, *concurrency, *timeout)
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

func round(opt asynq.RedisClientOpt, tasks, concurrency int, timeout time.Duration) (float64, error) {
	queue := fmt.Sprintf("bench-noop-%d-%d", os.Getpid(), time.Now().UnixNano())
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
	return float64(tasks) / time.Since(start).Seconds(), nil
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
