package config

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/rdb"
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

// REDIS_WAIT_REPLICAS follows REDIS_MODE unless set, on api and consumer
// alike; REDIS_WAIT_TIMEOUT must leave REDIS_TIMEOUT room for the reply.
func TestRedisWait(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      map[string]string
		replicas int
		timeout  time.Duration
		errVar   string
	}{
		{name: "single: off", env: map[string]string{}, timeout: 250 * time.Millisecond},
		{name: "sentinel: one replica", env: map[string]string{"REDIS_MODE": "sentinel"}, replicas: 1, timeout: 250 * time.Millisecond},
		{name: "cluster: one replica", env: map[string]string{"REDIS_MODE": "cluster"}, replicas: 1, timeout: 250 * time.Millisecond},
		{name: "set on a cluster", env: map[string]string{"REDIS_MODE": "cluster", "REDIS_WAIT_REPLICAS": "2", "REDIS_WAIT_TIMEOUT": "100ms"}, replicas: 2, timeout: 100 * time.Millisecond},
		{name: "turned off on a cluster", env: map[string]string{"REDIS_MODE": "cluster", "REDIS_WAIT_REPLICAS": "0"}, timeout: 250 * time.Millisecond},
		{name: "not a number", env: map[string]string{"REDIS_WAIT_REPLICAS": "one"}, errVar: "REDIS_WAIT_REPLICAS"},
		{name: "negative", env: map[string]string{"REDIS_WAIT_REPLICAS": "-1"}, errVar: "REDIS_WAIT_REPLICAS"},
		{name: "timeout not below REDIS_TIMEOUT", env: map[string]string{"REDIS_WAIT_TIMEOUT": "2s", "REDIS_TIMEOUT": "2s"}, errVar: "REDIS_WAIT_TIMEOUT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.env["API_AUTH"] = "disabled" // the API's one required setting
			api, la := LoadAPI(envconf.FromMap(tc.env))
			consumer, lc := LoadConsumer(envconf.FromMap(tc.env))
			if tc.errVar != "" {
				require.ErrorContains(t, la.Errs(), tc.errVar)
				require.ErrorContains(t, lc.Errs(), tc.errVar)
				return
			}
			require.NoError(t, errors.Join(la.Err(), lc.Err()))
			for _, got := range []rdb.FenceConfig{api.RedisWait, consumer.RedisWait} {
				require.Equal(t, tc.replicas, got.Replicas)
				require.Equal(t, tc.timeout, got.Timeout)
				require.Equal(t, "msgpulse:", got.Prefix)
			}
		})
	}
}
