package api

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every label drawn from a request belongs to a fixed set (issue 43): a
// caller without a key sent 300 requests with 1 MB methods and added 300
// series and ~290 MiB of heap that were never freed.
func TestRequestLabelsComeFromAFixedSet(t *testing.T) {
	h := setup(t, options{})
	base := len(h.metricsText())
	huge := func(i int) string { return strings.Repeat("M", 100<<10) + fmt.Sprint(i) }
	for i, tc := range []struct{ method, path string }{
		{"FOO", "/api/messages/send"},
		{"get", "/api/messages/x"},
		{"PROPFIND", "/console/x"},
		{huge(1), "/api/messages/send"},
		{huge(2), "/no/such/" + strings.Repeat("p", 4000)},
		{huge(3), "/metrics"},
		{http.MethodGet, "/no/such/path?q=" + strings.Repeat("q", 4000)},
		{http.MethodDelete, "/api/messages/send"},
	} {
		req, err := http.NewRequest(tc.method, h.http.URL+tc.path, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err, "request %d", i)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		require.GreaterOrEqual(t, resp.StatusCode, 400, "request %d answered %d", i, resp.StatusCode)
	}
	text := h.metricsText()
	routes := map[string]bool{"unmatched": true}
	for _, r := range h.srv.Routes() {
		routes[r[1]] = true
	}
	line := regexp.MustCompile(`(?m)^msgpulse_http_requests_total\{code="(\d{3})",method="([^"]*)",route="([^"]*)"\}`)
	seen := 0
	for _, m := range line.FindAllStringSubmatch(text, -1) {
		seen++
		require.True(t, m[2] == "other" || servedMethods[m[2]], "method label %.40q", m[2])
		require.True(t, routes[m[3]], "route label %.40q", m[3])
	}
	require.NotZero(t, seen)
	require.Contains(t, text, `method="other",route="unmatched"`)
	require.Less(t, len(text)-base, 8<<10, "/metrics grew by %d bytes for 8 requests", len(text)-base)
}

func TestMethodLabel(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"GET", "GET"}, {"POST", "POST"}, {"DELETE", "DELETE"}, {"OPTIONS", "OPTIONS"},
		{"get", "other"}, {"PROPFIND", "other"}, {"", "other"}, {strings.Repeat("X", 1<<20), "other"},
	} {
		require.Equal(t, tc.want, methodLabel(tc.in), "%.20q", tc.in)
	}
}
