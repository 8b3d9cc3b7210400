package media_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/egress"
	"github.com/msgpulse/msgpulse/internal/media"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

func TestFetchIsGuardedAndBounded(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/tiny":
			_, _ = w.Write([]byte("abc"))
		case "/ok":
			_, _ = w.Write([]byte("hello world"))
		case "/boom":
			http.Error(w, "down", http.StatusBadGateway)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	rdb := testenv.NewRedis(t)
	guarded, err := media.New(rdb.Client, media.Config{Prefix: rdb.Prefix})
	require.NoError(t, err)
	open, err := media.New(rdb.Client, media.Config{Prefix: rdb.Prefix, Egress: egress.Policy{AllowPrivate: true}})
	require.NoError(t, err)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		s     *media.Store
		path  string
		kind  string
		class provider.Class
		code  string
	}{
		{"loopback refused by the egress guard", guarded, "/ok", "image", provider.Permanent, "media_blocked"},
		{"below 5 bytes", open, "/tiny", "file", provider.Permanent, "media_too_small"},
		{"unknown type", open, "/ok", "voice", provider.Permanent, "media_type"},
		{"404", open, "/nope", "file", provider.Permanent, "media_fetch"},
		{"502 is retried", open, "/boom", "file", provider.Transient, "media_fetch"},
		{"fine", open, "/ok", "file", "", ""},
	} {
		f, err := tc.s.Fetch(ctx, srv.URL+tc.path, tc.kind)
		if tc.code == "" {
			require.NoError(t, err, tc.name)
			require.Len(t, f.SHA256, 64)
			continue
		}
		var pe *provider.Error
		require.ErrorAs(t, err, &pe, tc.name)
		require.Equal(t, tc.class, pe.Class, tc.name)
		require.Equal(t, tc.code, pe.Code, tc.name)
	}
	_, err = media.New(rdb.Client, media.Config{Prefix: "x", CacheTTL: 73 * 3600e9})
	require.Error(t, err, "a media_id lives 3 days")
}

// A file served slower than MinRate fails for good once RateWindow has
// passed, naming the slow download; one served fast is fetched whatever
// its size (within the kind's limit).
func TestFetchRefusesASlowDownload(t *testing.T) {
	t.Parallel()
	fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(bytes.Repeat([]byte("x"), 64<<10))
	}))
	t.Cleanup(fast.Close)
	drip := testenv.Drip(t) // a byte a second, as issue 37's tenant served its images
	rdb := testenv.NewRedis(t)
	s, err := media.New(rdb.Client, media.Config{Prefix: rdb.Prefix, Egress: egress.Policy{AllowPrivate: true}, RateWindow: 500 * time.Millisecond})
	require.NoError(t, err)
	f, err := s.Fetch(context.Background(), fast.URL+"/fast", "image")
	require.NoError(t, err)
	require.EqualValues(t, 64<<10, f.Size)
	start := time.Now()
	_, err = s.Fetch(context.Background(), drip.URL+"/drip", "image")
	var pe *provider.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, provider.Permanent, pe.Class)
	require.Equal(t, "media_too_slow", pe.Code)
	require.Contains(t, err.Error(), "media download too slow")
	require.Contains(t, err.Error(), "WECOM_MEDIA_MIN_RATE")
	require.NotContains(t, err.Error(), drip.URL, "no URL in the reason")
	require.Less(t, time.Since(start), 30*time.Second, "given up long before the file could arrive")
}

// The same file for one corp is uploaded once by the whole fleet: two
// stores (two consumers) asking at once, one upload; the same bytes under
// another name are another upload.
func TestUploadIsOncePerFileAcrossConsumers(t *testing.T) {
	t.Parallel()
	rdb := testenv.NewRedis(t)
	a, err := media.New(rdb.Client, media.Config{Prefix: rdb.Prefix, Poll: 10 * time.Millisecond})
	require.NoError(t, err)
	b, err := media.New(rdb.Client, media.Config{Prefix: rdb.Prefix, Poll: 10 * time.Millisecond})
	require.NoError(t, err)
	var uploads atomic.Int32
	release := make(chan struct{})
	upload := func(ctx context.Context) (string, error) {
		n := uploads.Add(1)
		select {
		case <-release: // held until both consumers asked
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return fmt.Sprintf("media-%d", n), nil
	}
	ctx := testenv.Context(t, 30*time.Second)
	ids := make(chan string, 2)
	for _, s := range []*media.Store{a, b} {
		go func() {
			id, err := s.Upload(ctx, "corp", "file", "sha", "report.pdf", upload)
			assert.NoError(t, err)
			ids <- id
		}()
	}
	testenv.WaitFor(t, 10*time.Second, "one upload under way and the other consumer waiting on it", func() bool {
		n, err := rdb.Client.Exists(ctx, a.Key("corp", "file", "sha", "report.pdf")+":lock").Result()
		require.NoError(t, err)
		return uploads.Load() == 1 && n == 1
	})
	close(release)
	require.Equal(t, "media-1", <-ids)
	require.Equal(t, "media-1", <-ids)
	require.EqualValues(t, 1, uploads.Load())
	id, err := b.Upload(ctx, "corp", "file", "sha", "other-name.pdf", upload)
	require.NoError(t, err)
	require.Equal(t, "media-2", id, "another name, another upload")
	id, err = rdb.Client.Get(ctx, a.Key("corp", "file", "sha", "report.pdf")).Result()
	require.NoError(t, err)
	require.Equal(t, "media-1", id)
}

// A file is held once, in at most its kind's limit, whether the server
// says its length or not: exactly the limit is taken, one byte more is
// refused (issue 43: the pool reserves the limit before the download, and
// the file must never hold more than that).
func TestFetchHoldsAtMostTheLimit(t *testing.T) {
	t.Parallel()
	limit := int(media.MaxBytes["image"])
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var size int
		_, _ = fmt.Sscan(r.URL.Query().Get("size"), &size)
		body := bytes.Repeat([]byte{'x'}, size)
		if r.URL.Query().Get("length") == "known" {
			w.Header().Set("Content-Length", fmt.Sprint(size))
			_, _ = w.Write(body)
			return
		}
		for len(body) > 0 { // chunked: no Content-Length
			n := min(len(body), 100_000)
			_, _ = w.Write(body[:n])
			w.(http.Flusher).Flush()
			body = body[n:]
		}
	}))
	t.Cleanup(srv.Close)
	rdb := testenv.NewRedis(t)
	s, err := media.New(rdb.Client, media.Config{Prefix: rdb.Prefix, Egress: egress.Policy{AllowPrivate: true}})
	require.NoError(t, err)
	for _, tc := range []struct {
		length string
		size   int
		code   string
	}{
		{"known", 2048, ""},
		{"unknown", 2048, ""},
		{"unknown", 3<<20 + 17, ""},
		{"known", limit, ""},
		{"unknown", limit, ""},
		{"known", limit + 1, "media_too_large"},
		{"unknown", limit + 1, "media_too_large"},
	} {
		name := fmt.Sprintf("%s length, %d bytes", tc.length, tc.size)
		f, err := s.Fetch(context.Background(), fmt.Sprintf("%s/f?length=%s&size=%d", srv.URL, tc.length, tc.size), "image")
		if tc.code != "" {
			var pe *provider.Error
			require.ErrorAs(t, err, &pe, name)
			require.Equal(t, tc.code, pe.Code, name)
			continue
		}
		require.NoError(t, err, name)
		require.EqualValues(t, tc.size, f.Size, name)
		require.LessOrEqual(t, f.Held(), int64(limit), name)
		if tc.length == "known" {
			require.EqualValues(t, tc.size, f.Held(), "%s: one allocation of exactly the length", name)
		}
		got, err := io.ReadAll(f.Open())
		require.NoError(t, err, name)
		require.Equal(t, bytes.Repeat([]byte{'x'}, tc.size), got, name)
		sum := sha256.Sum256(got)
		require.Equal(t, hex.EncodeToString(sum[:]), f.SHA256, name)
	}
}
