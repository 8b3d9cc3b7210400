package console

import (
	"context"
	"errors"
	"fmt"
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
	id, batchID := r.URL.Query().Get("taskId"), r.URL.Query().Get("batchId")
	data := map[string]any{"TaskID": id, "BatchID": batchID}
	var err error
	switch {
	case id != "":
		err = c.messageData(r.Context(), id, data)
	case batchID != "":
		err = c.batchData(r.Context(), batchID, data)
	}
	if c.failed(w, rq, err, answer{errUnmaskable, http.StatusInternalServerError}) {
		return
	}
	c.render(w, http.StatusOK, "message", rq, data)
}

// errUnmaskable: a record that the allow-list cannot mask is not shown.
var errUnmaskable = errors.New("the record cannot be masked")

// present reports whether a lookup found its record: a missing one sets
// data[missing] for the page, and only another error is one to show.
func present(err error, data map[string]any, missing string) (bool, error) {
	if errors.Is(err, status.ErrNotFound) {
		data[missing] = true
		return false, nil
	}
	return err == nil, err
}

// messageData puts a message's record and history into data, or NotFound.
func (c *Console) messageData(ctx context.Context, id string, data map[string]any) error {
	rec, err := c.d.Status.Get(ctx, id)
	if ok, err := present(err, data, "NotFound"); !ok {
		return err
	}
	// Shown by its JSON fields, masked by the dead-letter pages' allow-list:
	// the recipient is stored masked, but masked again in case a writer
	// forgot, and so is any field added later.
	shown, err := maskRecord(rec)
	if err != nil {
		return fmt.Errorf("%w: %w", errUnmaskable, err)
	}
	data["Record"] = shown
	data["History"] = history(rec)
	return nil
}

// batchData puts a batch's counts by state and its tasks into data, or
// BatchNotFound.
func (c *Console) batchData(ctx context.Context, id string, data map[string]any) error {
	b, err := c.d.Status.GetBatch(ctx, id)
	if ok, err := present(err, data, "BatchNotFound"); !ok {
		return err
	}
	counts := make([]batchCount, 0, len(b.Counts))
	for st, n := range b.Counts {
		counts = append(counts, batchCount{st, n})
	}
	sort.Slice(counts, func(i, j int) bool { return counts[i].State < counts[j].State })
	data["Batch"] = map[string]any{"Total": len(b.TaskIDs), "Counts": counts, "TaskIDs": b.TaskIDs}
	return nil
}
