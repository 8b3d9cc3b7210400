package console_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

// The message lookup shows the trace of the request that created the
// message, so on-call can open it in their tracing UI; a record without
// one (tracing off) shows a dash.
func TestLookupShowsTheTraceID(t *testing.T) {
	h := setup(t)
	ctx := t.Context()
	traced, untraced := "traced-"+testenv.ID(), "untraced-"+testenv.ID()
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	require.NoError(t, h.stack.Status.Create(ctx, status.Record{TaskID: traced, Channel: "email", TraceID: traceID}))
	require.NoError(t, h.stack.Status.Create(ctx, status.Record{TaskID: untraced, Channel: "email"}))
	c := h.client(t, true)
	for id, want := range map[string]string{traced: `<td class="trace">` + traceID + `</td>`, untraced: `<td class="trace">–</td>`} {
		resp, err := c.Get(h.http.URL + "/console/messages?taskId=" + id)
		require.NoError(t, err)
		page := readBody(t, resp)
		require.Equal(t, http.StatusOK, resp.StatusCode, page)
		require.Contains(t, page, want)
	}
}
