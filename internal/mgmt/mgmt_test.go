package mgmt

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A list of nodes where one does not answer: every call reaches the node
// that does, sticks to it, and no error names the password.
func TestClientFailsOverBetweenNodes(t *testing.T) {
	var calls int
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if u, p, ok := r.BasicAuth(); !ok || u != "ops" || p != "s3cret" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(`{"rabbitmq_version":"3.10.8","cluster_name":"c"}`))
	}))
	defer live.Close()
	host := strings.TrimPrefix(live.URL, "http://")
	c, err := New("http://ops:s3cret@127.0.0.1:1,http://ops:s3cret@"+host, 2*time.Second)
	require.NoError(t, err)
	ctx := context.Background()
	for range 4 { // the first call may start at either node
		ov, err := c.Overview(ctx)
		require.NoError(t, err)
		require.Equal(t, "3.10.8", ov.RabbitMQVersion)
		require.Equal(t, host, c.Host(), "sticks to the node that answered")
	}
	require.Equal(t, 4, calls)

	dead, err := New("http://ops:s3cret@127.0.0.1:1,http://ops:s3cret@127.0.0.1:2", 2*time.Second)
	require.NoError(t, err)
	_, err = dead.Overview(ctx)
	require.ErrorIs(t, err, ErrUnreachable)
	require.NotContains(t, err.Error(), "s3cret")
	require.Contains(t, err.Error(), "127.0.0.1:1")
	require.Contains(t, err.Error(), "127.0.0.1:2")

	_, err = New("http://ops:s3cret@127.0.0.1:1,not a url", time.Second)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret")
}

func TestVHostOf(t *testing.T) {
	cases := []struct{ url, want string }{
		{"amqp://guest:guest@127.0.0.1:5672", "/"},
		{"amqp://guest:guest@127.0.0.1:5672/", "/"},
		{"amqp://guest:guest@127.0.0.1:5672/%2f", "/"},
		{"amqp://guest:guest@127.0.0.1:5672/prod", "prod"},
		{"amqps://u:p@host:5671/team%2Fprod?cacertfile=/ca.pem", "team/prod"},
		{"amqp://guest:guest@127.0.0.1:5672/test-x-1-ab", "test-x-1-ab"},
		{"::not a url", "/"},
		{"amqp://u:p@h1:5672/prod,amqp://u:p@h2:5672/prod", "prod"}, // one URL per node of a cluster
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, VHostOf(tc.url), tc.url)
	}
}
