package rdb_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/rdb"
)

// REDIS_MODE picks the client; bad URLs fail without showing a password.
func TestOpenModes(t *testing.T) {
	for _, tc := range []struct {
		name, mode, url string
		want            any // the client's type, or nil for an error
	}{
		{"single", "single", "redis://127.0.0.1:6379/0", &redis.Client{}},
		{"default is single", "", "redis://127.0.0.1:6379/0", &redis.Client{}},
		{"cluster", "cluster", "redis://127.0.0.1:7101?addr=127.0.0.1:7102&addr=127.0.0.1:7103", &redis.ClusterClient{}},
		{"sentinel", "sentinel", "redis://127.0.0.1:27201?addr=127.0.0.1:27202&master_name=m", &redis.Client{}},
		{"sentinel needs a master name", "sentinel", "redis://127.0.0.1:27201", nil},
		{"bad cluster URL", "cluster", "redis://:pw@127.0.0.1:7101?dial_timeout=soon", nil},
		{"bad sentinel URL", "sentinel", "redis://:pw@127.0.0.1:1?master_name=m&dial_timeout=soon", nil},
		{"unknown mode", "ring", "redis://127.0.0.1:6379/0", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := rdb.Open(tc.mode, tc.url, rdb.WithClientName("t"))
			if tc.want == nil {
				require.Error(t, err)
				require.NotContains(t, err.Error(), "pw")
				return
			}
			require.NoError(t, err)
			defer func() { _ = c.Close() }()
			require.IsType(t, tc.want, c)
		})
	}
}
