package redact

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPasswords(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"amqp://guest:guest@127.0.0.1:5672/", "amqp://guest:xxxxx@127.0.0.1:5672/"},
		{"http://guest:guest@127.0.0.1:15672", "http://guest:xxxxx@127.0.0.1:15672"},
		{"http://guest:guest@", "http://guest:xxxxx@"},
		{"http://guest:gu#st@host:15672", "http://guest:xxxxx@host:15672"},
		{"http://guest:g%zzt@host", "http://guest:xxxxx@host"},
		{"http://guest:p@ss@host/x", "http://guest:xxxxx@host/x"},
		{"http:/guest:guest@host", "http:/guest:xxxxx@host"},
		{"guest:guest@host:15672", "guest:xxxxx@host:15672"},
		{"redis://:secret@127.0.0.1:6379/0", "redis://:xxxxx@127.0.0.1:6379/0"},
		{`Post "https://u:hunter2@hooks.example/cb": dial tcp`, `Post "https://u:xxxxx@hooks.example/cb": dial tcp`},
		{"http://127.0.0.1:15672", "http://127.0.0.1:15672"},
		{"amqp://guest@host/", "amqp://guest@host/"},
		{"http://host:8080/users/a@b.com", "http://host:8080/users/a@b.com"},
		{"no url here", "no url here"},
	} {
		require.Equal(t, tc.want, Passwords(tc.in), tc.in)
	}
}
