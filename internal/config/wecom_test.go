package config

import (
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/envconf"
)

func TestLoadWeCom(t *testing.T) {
	t.Parallel()
	app := map[string]string{"CHANNELS": "mail,sms,wecom", "WECOM_CORP_ID": "ww1", "WECOM_CORP_SECRET": "s", "WECOM_AGENT_ID": "1000002"}
	for _, tc := range []struct {
		name string
		env  map[string]string
		bad  string // the variable the error names; "" = valid
	}{
		{"application", app, ""},
		{"robots only", map[string]string{"CHANNELS": "wecom", "WECOM_ROBOTS": "ops=K1,alerts=K2"}, ""},
		{"not consumed: nothing required", map[string]string{"CHANNELS": "mail,sms"}, ""},
		{"nothing configured", map[string]string{"CHANNELS": "mail,sms,wecom"}, "WECOM_CORP_ID"},
		{"no secret", with(maps.Clone(app), "WECOM_CORP_SECRET", ""), "WECOM_CORP_ID"},
		{"agent id", with(maps.Clone(app), "WECOM_AGENT_ID", "x"), "WECOM_AGENT_ID"},
		{"robots", with(maps.Clone(app), "WECOM_ROBOTS", "ops"), "WECOM_ROBOTS"},
		{"interval", with(maps.Clone(app), "WECOM_DUPLICATE_CHECK_INTERVAL", "0"), "WECOM_DUPLICATE_CHECK_INTERVAL"},
		{"base", with(maps.Clone(app), "WECOM_API_BASE", "ftp://x"), "WECOM_API_BASE"},
		{"unknown channel", map[string]string{"CHANNELS": "mail,fax"}, "CHANNELS"},
	} {
		_, l := LoadConsumer(envconf.FromMap(tc.env))
		if tc.bad == "" {
			require.NoError(t, l.Err(), tc.name)
			continue
		}
		require.ErrorContains(t, l.Err(), tc.bad, tc.name)
	}
	c, l := LoadConsumer(envconf.FromMap(with(maps.Clone(app), "WECOM_ROBOTS", "ops=K1")))
	require.NoError(t, l.Err())
	require.Equal(t, []string{"mail", "sms", "wecom"}, c.Channels)
	require.Equal(t, int64(1000002), c.WeCom.AgentID)
	require.Equal(t, 1800*time.Second, c.WeCom.DuplicateCheckInterval)
	require.Equal(t, "https://qyapi.weixin.qq.com", c.WeCom.APIBase)
	require.Equal(t, map[string]string{"ops": "K1"}, c.WeCom.Robots)
}

// The API reads WECOM_ROBOTS for the names and tenants only (keys may be
// left out), and the issue-21 limits.
func TestLoadAPIRobotsAndTenantLimits(t *testing.T) {
	t.Parallel()
	base := map[string]string{"API_KEYS": "shop/backend:k0123456789abcdefghij"}
	c, l := LoadAPI(envconf.FromMap(base))
	require.NoError(t, l.Err())
	require.Empty(t, c.WeComRobots, "none set: every robot is 404")
	require.Equal(t, 0, c.Limits.PerRecipientDayAllTenants, "off by default")
	require.Equal(t, int64(8<<20), c.BatchMaxBytes)

	c, l = LoadAPI(envconf.FromMap(with(maps.Clone(base), "WECOM_ROBOTS", "ops, alerts=@shop+blog, full=K1@shop",
		"VERIFY_MAX_PER_RECIPIENT_PER_DAY_ALL_TENANTS", "20", "BATCH_MAX_BYTES", "1048576")))
	require.NoError(t, l.Err())
	require.Equal(t, map[string][]string{"ops": nil, "alerts": {"shop", "blog"}, "full": {"shop"}}, c.WeComRobots)
	require.Equal(t, 20, c.Limits.PerRecipientDayAllTenants)
	require.Equal(t, int64(1<<20), c.BatchMaxBytes)

	for name, bad := range map[string]string{"WECOM_ROBOTS": "ops=@", "BATCH_MAX_BYTES": "10", "VERIFY_MAX_PER_RECIPIENT_PER_DAY_ALL_TENANTS": "-1"} {
		_, l := LoadAPI(envconf.FromMap(with(maps.Clone(base), name, bad)))
		require.ErrorContains(t, l.Err(), name)
	}
}

// Issue 36: BATCH_MAX_BYTES and MAX_MESSAGE_BYTES stop at 16 MiB, RabbitMQ
// 4.x's default max_message_size: a larger message fails on such a broker.
func TestMessageSizesStopAtTheBrokersDefault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		load func(map[string]string) error
	}{
		{"BATCH_MAX_BYTES", func(env map[string]string) error { _, l := LoadAPI(envconf.FromMap(env)); return l.Err() }},
		{"MAX_MESSAGE_BYTES", func(env map[string]string) error { _, l := LoadConsumer(envconf.FromMap(env)); return l.Err() }},
	} {
		require.NoError(t, tc.load(map[string]string{tc.name: "16777216", "API_KEYS": "shop/backend:k0123456789abcdefghij"}), tc.name)
		require.ErrorContains(t, tc.load(map[string]string{tc.name: "16777217", "API_KEYS": "shop/backend:k0123456789abcdefghij"}), tc.name)
	}
}

// Issue 43: the media pool's bytes, per consumer and per tenant, default
// to 192 MiB and 64 MiB; neither may be below the largest file (20 MiB),
// which could then never be held, nor a tenant's above the whole.
func TestMediaBytes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name              string
		env               map[string]string
		bad               string // the variable the error names; "" = valid
		whole, tenantPart int
	}{
		{"defaults", map[string]string{}, "", 192 << 20, 64 << 20},
		{"set", map[string]string{"WECOM_MEDIA_MAX_BYTES": "104857600", "WECOM_MEDIA_TENANT_MAX_BYTES": "20971520"}, "", 100 << 20, 20 << 20},
		{"a tenant's share is the whole", map[string]string{"WECOM_MEDIA_MAX_BYTES": "67108864"}, "", 64 << 20, 64 << 20},
		{"a tenant's share above the whole", map[string]string{"WECOM_MEDIA_MAX_BYTES": "41943040"}, "WECOM_MEDIA_TENANT_MAX_BYTES", 0, 0},
		{"below the largest file", map[string]string{"WECOM_MEDIA_TENANT_MAX_BYTES": "20971519"}, "WECOM_MEDIA_TENANT_MAX_BYTES", 0, 0},
		{"the whole below the largest file", map[string]string{"WECOM_MEDIA_MAX_BYTES": "1048576"}, "WECOM_MEDIA_MAX_BYTES", 0, 0},
	} {
		c, l := LoadConsumer(envconf.FromMap(tc.env))
		if tc.bad != "" {
			require.ErrorContains(t, l.Err(), tc.bad, tc.name)
			continue
		}
		require.NoError(t, l.Err(), tc.name)
		require.Equal(t, tc.whole, c.WeComAccounts.MediaMaxBytes, tc.name)
		require.Equal(t, tc.tenantPart, c.WeComAccounts.MediaTenantMaxBytes, tc.name)
	}
}
