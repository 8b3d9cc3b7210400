package dispatch_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/dispatch/dispatchtest"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

// fileServer serves /logo.png (an image of 2 KB) and /huge.png (11 MB),
// counting fetches.
func fileServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var fetches atomic.Int32
	logo := bytes.Repeat([]byte("\x89PNG"), 512)
	huge := bytes.Repeat([]byte{0}, 11<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		switch r.URL.Path {
		case "/logo.png":
			_, _ = w.Write(logo)
		case "/huge.png":
			_, _ = w.Write(huge)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &fetches
}

func TestWeComImageIsUploadedOnceAndSentByMediaID(t *testing.T) {
	s, srv := setupWeCom(t, dispatchtest.Options{MediaCacheTTL: 2 * time.Second})
	files, fetches := fileServer(t)
	s.StartConsumer("c1", 4)
	image := func(user, url string) string {
		return s.WeCom("", []string{user}, func(m *envelope.Message) {
			m.Template, m.Variables = "", nil
			m.Media = &envelope.Media{Type: "image", URL: url, Filename: "logo.png"}
		})[0]
	}
	for _, u := range []string{"ann", "bob", "cyd"} {
		waitStatus(t, s, image(u, files.URL+"/logo.png"), status.Sent) // one by one
	}
	require.Equal(t, 1, srv.Uploads(), "one upload for three sends")
	mediaID := srv.ReceivedBy("ann")[0].Content
	for _, u := range []string{"ann", "bob", "cyd"} {
		got := srv.ReceivedBy(u)
		require.Len(t, got, 1, u)
		require.Equal(t, "image", got[0].MsgType)
		require.Equal(t, mediaID, got[0].Content, "the same media_id")
	}
	name, size, ok := srv.Uploaded(mediaID)
	require.True(t, ok)
	require.Equal(t, "logo.png", name)
	require.Equal(t, 2048, size)
	require.EqualValues(t, 3, fetches.Load())

	// Once the cached media_id has expired, the same image is uploaded again.
	testenv.WaitFor(t, 10*time.Second, "the media_id cache entry to expire", func() bool {
		return countKeys(t, s.Redis.Client, s.Redis.Prefix+"wecom:media:*") == 0
	})
	waitStatus(t, s, image("dan", files.URL+"/logo.png"), status.Sent)
	require.Equal(t, 2, srv.Uploads())
	require.NotEqual(t, mediaID, srv.ReceivedBy("dan")[0].Content)

	// Above WeCom's 10 MB for an image: failed for good, nothing uploaded.
	rec := waitStatus(t, s, image("eve", files.URL+"/huge.png"), status.Failed)
	require.Equal(t, status.ReasonPermanent, rec.Reason)
	require.Contains(t, rec.LastError, "at most")
	require.Equal(t, 2, srv.Uploads())
	require.Empty(t, srv.ReceivedBy("eve"))
}

// The same image to 50 users at once, as single messages: one upload, and
// the sends merged as text ones are.
func TestConcurrentImagesUploadOnceAndMerge(t *testing.T) {
	s, srv := setupWeCom(t, dispatchtest.Options{MergeWindow: 100 * time.Millisecond})
	files, _ := fileServer(t)
	var ids []string
	for _, u := range users("img", 50) {
		ids = append(ids, s.WeCom("", []string{u}, func(m *envelope.Message) {
			m.Template, m.Variables, m.Level = "", nil, "normal"
			m.Media = &envelope.Media{Type: "image", URL: files.URL + "/logo.png"}
		})...)
	}
	s.StartConsumer("c1", 64)
	for _, id := range ids {
		waitStatus(t, s, id, status.Sent)
	}
	require.Equal(t, 1, srv.Uploads())
	t.Logf("50 image messages: %d upload, %d message/send calls", srv.Uploads(), srv.SendCalls())
	require.LessOrEqual(t, srv.SendCalls(), 2)
}

// countKeys counts the keys matching pattern on every master: on a Redis
// Cluster, KEYS through the cluster client asks one node only.
func countKeys(t *testing.T, c redis.UniversalClient, pattern string) int {
	t.Helper()
	var n atomic.Int64
	count := func(ctx context.Context, node redis.Cmdable) error {
		keys, err := node.Keys(ctx, pattern).Result()
		n.Add(int64(len(keys)))
		return err
	}
	if cc, ok := rdb.AsCluster(c); ok {
		require.NoError(t, cc.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error { return count(ctx, m) }))
	} else {
		require.NoError(t, count(context.Background(), c))
	}
	return int(n.Load())
}

// The same bytes under another name are another file to WeCom (it shows
// the name): each gets its own upload, and a tenant never gets a media_id
// uploaded under another tenant's name for the same bytes (issue 37).
func TestMediaCacheKeyHasTheFileName(t *testing.T) {
	s, srv := setupWeCom(t, dispatchtest.Options{})
	files, _ := fileServer(t)
	s.StartConsumer("c1", 4)
	send := func(user, tenant, name string) string {
		return s.WeCom("", []string{user}, func(m *envelope.Message) {
			m.Template, m.Variables, m.Tenant = "", nil, tenant
			m.Media = &envelope.Media{Type: "file", URL: files.URL + "/logo.png", Filename: name}
		})[0]
	}
	waitStatus(t, s, send("ann", "shop", "shop-price-list.pdf"), status.Sent)
	waitStatus(t, s, send("bob", "blog", "blog-draft.pdf"), status.Sent)
	waitStatus(t, s, send("cyd", "blog", "blog-draft.pdf"), status.Sent)
	require.Equal(t, 2, srv.Uploads(), "one upload per name")
	for user, want := range map[string]string{"ann": "shop-price-list.pdf", "bob": "blog-draft.pdf", "cyd": "blog-draft.pdf"} {
		got := srv.ReceivedBy(user)
		require.Len(t, got, 1, user)
		name, _, ok := srv.Uploaded(got[0].Content)
		require.True(t, ok)
		require.Equal(t, want, name, user)
	}
}
