package mgmt

import (
	"testing"

	"github.com/stretchr/testify/require"
)

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
