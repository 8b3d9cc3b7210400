package ratelimit_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/ratelimit"
)

func ptr(s string) *string { return &s }

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := ratelimit.Config{ID: "cfg-1", RequestsPerSecond: 10, RequestsPerMinute: 100, RequestsPerHour: 1000, RequestsPerDay: 10000, IsEnabled: true}
	tests := []struct {
		name    string
		mutate  func(*ratelimit.Config)
		wantErr string // substring; "" = valid
	}{
		{"valid global", func(*ratelimit.Config) {}, ""},
		{"valid provider", func(c *ratelimit.Config) { c.Provider = ptr("aliyun") }, ""},
		{"all unlimited", func(c *ratelimit.Config) { *c = ratelimit.Config{ID: "x"} }, ""},
		{"zeros skip ordering", func(c *ratelimit.Config) { c.RequestsPerMinute, c.RequestsPerHour = 0, 0; c.RequestsPerDay = 10 }, ""},
		{"max id length", func(c *ratelimit.Config) { c.ID = strings.Repeat("a", 64) }, ""},
		{"at the cap", func(c *ratelimit.Config) { c.RequestsPerDay = ratelimit.MaxLimit }, ""},
		{"empty id", func(c *ratelimit.Config) { c.ID = "" }, "id"},
		{"id too long", func(c *ratelimit.Config) { c.ID = strings.Repeat("a", 65) }, "id"},
		{"id upper case", func(c *ratelimit.Config) { c.ID = "Cfg" }, "id"},
		{"id with colon", func(c *ratelimit.Config) { c.ID = "a:b" }, "id"},
		{"empty provider", func(c *ratelimit.Config) { c.Provider = ptr("") }, "provider"},
		{"provider with space", func(c *ratelimit.Config) { c.Provider = ptr("ali yun") }, "provider"},
		{"negative", func(c *ratelimit.Config) { c.RequestsPerHour = -1 }, "requestsPerHour -1"},
		{"over the cap", func(c *ratelimit.Config) { c.RequestsPerDay = ratelimit.MaxLimit + 1 }, "requestsPerDay"},
		{"second over minute", func(c *ratelimit.Config) { c.RequestsPerSecond = 101 }, "requestsPerSecond 101 exceeds requestsPerMinute 100"},
		{"minute over day across a zero hour", func(c *ratelimit.Config) { c.RequestsPerHour = 0; c.RequestsPerMinute = 20000 }, "requestsPerMinute 20000 exceeds requestsPerDay 10000"},
		{"hour over day", func(c *ratelimit.Config) { c.RequestsPerDay = 999 }, "requestsPerHour 1000 exceeds requestsPerDay 999"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := ok
			tc.mutate(&c)
			err := c.Validate()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestConfigRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  ratelimit.Config
		want []ratelimit.Rule
	}{
		{
			name: "global, unlimited windows left out",
			cfg:  ratelimit.Config{ID: "cfg-1", RequestsPerSecond: 5, RequestsPerDay: 100, IsEnabled: true},
			want: []ratelimit.Rule{{Name: "rate limit cfg-1", Label: "rate limit (configured)", Key: "config:cfg-1", Windows: []ratelimit.Window{{Length: time.Second, Limit: 5}, {Length: 24 * time.Hour, Limit: 100}}}},
		},
		{
			name: "provider",
			cfg:  ratelimit.Config{ID: "cfg-2", Provider: ptr("aliyun"), RequestsPerMinute: 60, RequestsPerHour: 600, IsEnabled: true},
			want: []ratelimit.Rule{{Name: "rate limit cfg-2 (provider aliyun)", Label: "rate limit (configured)", Key: "config:cfg-2", Windows: []ratelimit.Window{{Length: time.Minute, Limit: 60}, {Length: time.Hour, Limit: 600}}}},
		},
		{name: "disabled", cfg: ratelimit.Config{ID: "cfg-3", RequestsPerSecond: 5}},
		{name: "all unlimited", cfg: ratelimit.Config{ID: "cfg-4", IsEnabled: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tc.cfg.Rules())
		})
	}
}

func TestConfigJSON(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(ratelimit.Config{ID: "g", RequestsPerSecond: 1, RequestsPerMinute: 2, RequestsPerHour: 3, RequestsPerDay: 4, IsEnabled: true})
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"g","provider":null,"requestsPerSecond":1,"requestsPerMinute":2,"requestsPerHour":3,"requestsPerDay":4,"isEnabled":true}`, string(b))
}
