package console

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/dlq"
)

// job is a replay the console runs in the background: a replay at a
// rate can outlast any HTTP request, so the page that started it shows
// its progress instead of waiting.
type job struct {
	ID      string
	Queue   string
	What    string
	By      string
	Started time.Time

	mu     sync.Mutex
	done   bool
	ended  time.Time
	report *dlq.ReplayReport
	err    string
}

// jobView is a job's state for the page, read under its lock.
type jobView struct {
	ID, Queue, What, By string
	Started, Ended      time.Time
	Done                bool
	Report              *dlq.ReplayReport
	Err                 string
}

func (j *job) view() jobView {
	j.mu.Lock()
	defer j.mu.Unlock()
	return jobView{ID: j.ID, Queue: j.Queue, What: j.What, By: j.By, Started: j.Started, Ended: j.ended, Done: j.done, Report: j.report, Err: j.err}
}

// keptJobs is how many replays the job pages remember.
const keptJobs = 100

// startReplay runs t.Replay in the console's own context: Close stops it
// between two messages, and what it holds goes back to the DLQ.
func (c *Console) startReplay(t *dlq.Tool, by, queue, what string, o dlq.Options) *job {
	c.jobsMu.Lock()
	c.jobSeq++
	j := &job{ID: strconv.Itoa(c.jobSeq), Queue: queue, What: what, By: by, Started: c.now().UTC()}
	c.jobs[j.ID] = j
	// Keep the last keptJobs: older ones that ended are forgotten (their
	// outcome is in the log).
	if old := strconv.Itoa(c.jobSeq - keptJobs); c.jobs[old] != nil && c.jobs[old].view().Done {
		delete(c.jobs, old)
	}
	c.jobsMu.Unlock()
	c.log.Info("console replay started", zap.String("api_key", by), zap.String("queue", queue), zap.String("what", what), zap.String("job", j.ID))
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		rep, err := t.Replay(c.ctx, queue, o)
		j.mu.Lock()
		j.done, j.ended, j.report = true, c.now().UTC(), rep
		if err != nil {
			j.err = err.Error()
		}
		j.mu.Unlock()
		fields := []zap.Field{zap.String("api_key", by), zap.String("queue", queue), zap.String("job", j.ID), zap.Error(err)}
		if rep != nil {
			fields = append(fields, zap.Int("replayed", rep.Replayed), zap.Int("skipped", rep.Skipped), zap.Int("failed", rep.Failed))
		}
		c.log.Info("console replay ended", fields...)
	}()
	return j
}

// running counts the replays still going, for the banner.
func (c *Console) running() int {
	c.jobsMu.Lock()
	defer c.jobsMu.Unlock()
	n := 0
	for _, j := range c.jobs {
		if !j.view().Done {
			n++
		}
	}
	return n
}

func (c *Console) jobPage(w http.ResponseWriter, r *http.Request, rq *request) {
	c.jobsMu.Lock()
	j, ok := c.jobs[r.PathValue("id")]
	c.jobsMu.Unlock()
	if !ok {
		http.Error(w, "no such job (jobs are kept until the API restarts)", http.StatusNotFound)
		return
	}
	v := j.view()
	data := map[string]any{"Job": v, "Queue": v.Queue}
	if !v.Done {
		data["Refresh"] = 1
	}
	c.render(w, http.StatusOK, "job", rq, data)
}
