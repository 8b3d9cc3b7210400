package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/receipt/unsub"
	"github.com/msgpulse/msgpulse/internal/redact"
	"github.com/msgpulse/msgpulse/internal/suppression"
	"github.com/msgpulse/msgpulse/internal/unsubscribe"
)

// memList is the suppression list as the unsubscribe handler sees it.
type memList struct {
	mu      sync.Mutex
	entries []suppression.Entry
}

func (l *memList) Add(_ context.Context, e suppression.Entry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, e)
	return nil
}

func (l *memList) len() int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.entries) }

// The API serves the unsubscribe link without X-API-Key (a reader's mail
// client has none), and no request line carries the token: the routed
// ones name the route, and echo's 404 and 405, which name the path, lose
// it to redact as every log line does (logging.Redacting).
func TestUnsubscribeLinkNeedsNoKeyAndLogsNoToken(t *testing.T) {
	signer, err := unsub.New(strings.Repeat("r", 32))
	require.NoError(t, err)
	list := &memList{}
	handler, err := unsubscribe.New(signer, list, nil)
	require.NoError(t, err)
	h := setup(t, options{unsubscribe: handler})
	tok, err := signer.Sign(unsub.Token{Tenant: "shop", Recipient: "reader@example.com", At: time.Now()})
	require.NoError(t, err)
	noKey := []string{"X-API-Key", ""}
	form := append([]string{"Content-Type", "application/x-www-form-urlencoded"}, noKey...)

	for _, tc := range []struct {
		name, method, path, body string
		hdr                      []string
		status, stored           int
	}{
		{"GET", "GET", unsub.Path + tok, "", noKey, http.StatusOK, 0},
		{"POST", "POST", unsub.Path + tok, "List-Unsubscribe=One-Click", form, http.StatusOK, 1},
		{"PUT", "PUT", unsub.Path + tok, "List-Unsubscribe=One-Click", form, http.StatusMethodNotAllowed, 1},
		{"a segment more", "GET", unsub.Path + tok + "/more", "", noKey, http.StatusNotFound, 1},
	} {
		var body any
		if tc.body != "" {
			body = tc.body
		}
		require.Equal(t, tc.status, h.do(tc.method, tc.path, body, tc.hdr...).Status, tc.name)
		require.Equal(t, tc.stored, list.len(), tc.name)
	}
	lines := h.logs.FilterMessage("request").All()
	routed := 0
	for _, l := range lines {
		b, err := json.Marshal(l.ContextMap())
		require.NoError(t, err)
		line := string(b)
		if l.ContextMap()["status"] == int64(http.StatusOK) {
			require.NotContains(t, line, tok, "a routed line names the route")
			require.Contains(t, line, unsubscribe.Route)
			routed++
		}
		require.NotContains(t, redact.Text(line), tok)
	}
	require.Equal(t, 2, routed, "the GET's and the POST's lines")
	require.Len(t, lines, 4)
}
