package media_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

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
