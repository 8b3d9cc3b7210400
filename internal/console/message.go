package console

import (
	"errors"
	"net/http"
	"sort"
	"time"

	"github.com/msgpulse/msgpulse/internal/status"
)

// event is one step of a message's history, from its status record.
type event struct {
	At   time.Time
	What string
}

// history orders what the status record says happened.
func history(rec status.Record) []event {
	out := []event{{rec.CreatedAt, "accepted (queued)"}}
	if rec.ScheduledAt != nil {
		out = append(out, event{*rec.ScheduledAt, "due (scheduled send time)"})
	}
	if rec.SentAt != nil {
		out = append(out, event{*rec.SentAt, "sent" + via(rec.Provider)})
	}
	if rec.SentAt == nil || !rec.UpdatedAt.Equal(*rec.SentAt) {
		out = append(out, event{rec.UpdatedAt, "last change: " + string(rec.Status)})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

func via(p string) string {
	if p == "" {
		return ""
	}
	return " via " + p
}

// batchCount is one state of a batch and how many of its tasks are in it.
type batchCount struct {
	State status.State
	N     int
}

// messagePage looks a message up by taskId, or a batch by batchId, in the
// status records. A batch shows its counts by state and links each task
// to its own lookup.
func (c *Console) messagePage(w http.ResponseWriter, r *http.Request, rq *request) {
	id := r.URL.Query().Get("taskId")
	batchID := r.URL.Query().Get("batchId")
	data := map[string]any{"TaskID": id, "BatchID": batchID}
	if id == "" && batchID != "" {
		b, err := c.d.Status.GetBatch(r.Context(), batchID)
		switch {
		case errors.Is(err, status.ErrNotFound):
			data["BatchNotFound"] = true
		case err != nil:
			c.fail(w, rq, http.StatusServiceUnavailable, err)
			return
		default:
			counts := make([]batchCount, 0, len(b.Counts))
			for st, n := range b.Counts {
				counts = append(counts, batchCount{st, n})
			}
			sort.Slice(counts, func(i, j int) bool { return counts[i].State < counts[j].State })
			data["Batch"] = map[string]any{"Total": len(b.TaskIDs), "Counts": counts, "TaskIDs": b.TaskIDs}
		}
	}
	if id != "" {
		rec, err := c.d.Status.Get(r.Context(), id)
		switch {
		case errors.Is(err, status.ErrNotFound):
			data["NotFound"] = true
		case err != nil:
			c.fail(w, rq, http.StatusServiceUnavailable, err)
			return
		default:
			// Shown by its JSON fields, masked by the dead-letter pages'
			// allow-list: the recipient is stored masked, but masked again
			// in case a writer forgot, and so is any field added later.
			shown, err := maskRecord(rec)
			if err != nil {
				c.fail(w, rq, http.StatusInternalServerError, err)
				return
			}
			data["Record"] = shown
			data["History"] = history(rec)
		}
	}
	c.render(w, http.StatusOK, "message", rq, data)
}
