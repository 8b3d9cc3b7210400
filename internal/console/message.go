package console

import (
	"errors"
	"net/http"
	"sort"
	"time"

	"github.com/msgpulse/msgpulse/internal/logging"
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

// messagePage looks a message up by taskId in the status records.
func (c *Console) messagePage(w http.ResponseWriter, r *http.Request, rq *request) {
	id := r.URL.Query().Get("taskId")
	data := map[string]any{"TaskID": id}
	if id != "" {
		rec, err := c.d.Status.Get(r.Context(), id)
		switch {
		case errors.Is(err, status.ErrNotFound):
			data["NotFound"] = true
		case err != nil:
			c.fail(w, rq, http.StatusServiceUnavailable, err)
			return
		default:
			rec.Recipient = logging.Mask(rec.Recipient) // stored masked; masked again in case a writer forgot
			data["Record"] = rec
			data["History"] = history(rec)
		}
	}
	c.render(w, http.StatusOK, "message", rq, data)
}
