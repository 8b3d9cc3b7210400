package config

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/envconf"
)

// AMQP_URL and RABBITMQ_MANAGEMENT_URL take one URL per node; each item is
// checked, and an error never shows a password.
func TestClusterURLLists(t *testing.T) {
	for _, tc := range []struct {
		name, env, value, errVar string
	}{
		{"three nodes", "AMQP_URL", "amqp://u:pw@h1:5672/v,amqp://u:pw@h2:5672/v, amqp://u:pw@h3:5672/v", ""},
		{"a bad scheme in the list", "AMQP_URL", "amqp://u:pw@h1:5672/v,http://u:pw@h2:5672/v", "AMQP_URL"},
		{"a relative item", "AMQP_URL", "amqp://u:pw@h1:5672/v,h2:5672", "AMQP_URL"},
		{"management list", "RABBITMQ_MANAGEMENT_URL", "http://u:pw@h1:15672,http://u:pw@h2:15672", ""},
		{"management bad item", "RABBITMQ_MANAGEMENT_URL", "http://u:pw@h1:15672,amqp://u:pw@h2:5672", "RABBITMQ_MANAGEMENT_URL"},
		{"redis cluster", "REDIS_MODE", "cluster", ""},
		{"redis mode unknown", "REDIS_MODE", "ring", "REDIS_MODE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, l := LoadTopology(envconf.FromMap(map[string]string{tc.env: tc.value}))
			if tc.errVar == "" {
				require.NoError(t, l.Err())
				if tc.env == "AMQP_URL" {
					require.Equal(t, tc.value, c.AMQPURL)
				}
				return
			}
			require.Error(t, l.Err())
			require.Contains(t, l.Err().Error(), tc.errVar)
			require.NotContains(t, l.Err().Error(), "pw@")
		})
	}
}

// REDIS_AUTOPIPELINE is full-duplex unless set (docs/performance.md has
// why), and takes only its modes.
func TestRedisAutoPipeline(t *testing.T) {
	for _, tc := range []struct{ value, want string }{
		{"", "full-duplex"}, {"on", "on"}, {"full-duplex", "full-duplex"}, {"off", "off"}, {"true", ""},
	} {
		t.Run(tc.value, func(t *testing.T) {
			env := map[string]string{}
			if tc.value != "" {
				env["REDIS_AUTOPIPELINE"] = tc.value
			}
			c, l := LoadTopology(envconf.FromMap(env))
			if tc.want == "" {
				require.ErrorContains(t, l.Err(), "REDIS_AUTOPIPELINE")
				return
			}
			require.NoError(t, l.Err())
			require.Equal(t, tc.want, c.RedisAutoPipeline)
		})
	}
}
