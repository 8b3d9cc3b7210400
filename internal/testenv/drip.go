package testenv

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// Drip starts a server that answers every request with a file it sends a
// byte a second, announcing 100,000 (a tenant's media host too slow to
// use), until the client gives up. It is closed when t ends.
func Drip(t testing.TB) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Header().Set("Content-Length", "100000")
		for {
			if _, err := w.Write([]byte{0x89}); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(time.Second):
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}
