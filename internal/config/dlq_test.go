package config

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/seal"
	"github.com/msgpulse/msgpulse/internal/topology"
)

func TestLoadDLQ(t *testing.T) {
	t.Parallel()
	secret := "0123456789abcdef0123456789abcdef-prod"
	for _, tc := range []struct {
		name   string
		env    map[string]string
		want   func(*DLQ) // applied to the defaults
		errVar string     // the variable the error must name
	}{
		{name: "defaults", env: map[string]string{}, want: func(*DLQ) {}},
		{
			name: "everything set",
			env: map[string]string{
				"AMQP_URL": "amqp://u:p@rabbit:5672/prod", "REDIS_PREFIX": "mp:", "CODE_SECRET": secret,
				"DLQ_CONFIRM_TIMEOUT": "30s", "DLQ_SCAN_MAX": "500", "DLQ_STATUS_TIMEOUT": "250ms", "MAIL_QUEUE_TTL": "2m",
				"QUEUE_TYPE": "quorum",
			},
			want: func(c *DLQ) {
				c.AMQPURL, c.RedisPrefix = "amqp://u:p@rabbit:5672/prod", "mp:"
				c.CodeSecret, c.CodeSecretIsDev = secret, false
				c.ConfirmTimeout, c.ScanMax, c.StatusTimeout = 30*time.Second, 500, 250*time.Millisecond
				c.Model.QueueType = topology.Quorum
				mc := c.Model.Channels[topology.Mail]
				mc.QueueTTL = 2 * time.Minute
				c.Model.Channels[topology.Mail] = mc
			},
		},
		{name: "short secret", env: map[string]string{"CODE_SECRET": "short"}, errVar: "CODE_SECRET"},
		{name: "scan max zero", env: map[string]string{"DLQ_SCAN_MAX": "0"}, errVar: "DLQ_SCAN_MAX"},
		{name: "confirm timeout too short", env: map[string]string{"DLQ_CONFIRM_TIMEOUT": "1ms"}, errVar: "DLQ_CONFIRM_TIMEOUT"},
		{name: "status timeout not a duration", env: map[string]string{"DLQ_STATUS_TIMEOUT": "soon"}, errVar: "DLQ_STATUS_TIMEOUT"},
		{name: "bad amqp scheme", env: map[string]string{"AMQP_URL": "http://rabbit"}, errVar: "AMQP_URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, l := LoadDLQ(envconf.FromMap(tc.env))
			if tc.errVar != "" {
				require.ErrorContains(t, l.Err(), tc.errVar)
				return
			}
			require.NoError(t, l.Errs())
			want := DLQ{
				Common: Common{
					AMQPURL: "amqp://guest:guest@127.0.0.1:5672/", RedisURL: "redis://127.0.0.1:6379/0", RedisMode: "single", RedisAutoPipeline: "full-duplex", RedisPrefix: "msgpulse:",
					ManagementURL: "http://guest:guest@127.0.0.1:15672", LogLevel: "info", LogFormat: "json",
				},
				Model: topology.DefaultConfig(), CodeSecret: seal.DevSecret, CodeSecretIsDev: true,
				ConfirmTimeout: 10 * time.Second, ScanMax: 100_000, StatusTimeout: 2 * time.Second,
			}
			tc.want(&want)
			require.Equal(t, want, got)
		})
	}
}

func TestLoadDLQUsageHidesSecret(t *testing.T) {
	t.Parallel()
	_, l := LoadDLQ(envconf.FromMap(map[string]string{}))
	var b bytes.Buffer
	l.Usage(&b)
	require.Contains(t, b.String(), "DLQ_SCAN_MAX")
	require.Contains(t, b.String(), "CODE_SECRET")
	require.NotContains(t, b.String(), seal.DevSecret)
}
