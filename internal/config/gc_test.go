package config

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/envconf"
)

func TestLoadGC(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		value string // "" = unset
		want  int    // 0: an error naming GOGC
	}{
		{"", DefaultGCPercent},
		{"100", 100},
		{"400", 400},
		{"off", -1},
		{"0", 0},
		{"-1", 0},
		{"lots", 0},
		{"100001", 0},
	} {
		t.Run(tc.value, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{}
			if tc.value != "" {
				env["GOGC"] = tc.value
			}
			l := envconf.New(envconf.FromMap(env))
			got := loadGC(l)
			if tc.want == 0 {
				require.ErrorContains(t, l.Err(), "GOGC")
				return
			}
			require.NoError(t, l.Err())
			require.Equal(t, tc.want, got.GCPercent())
		})
	}
}

// The services tune the collector through cli.Main; the command-line tools
// keep Go's default.
func TestServicesSetTheirGCTarget(t *testing.T) {
	t.Parallel()
	api, l := LoadAPI(envconf.FromMap(map[string]string{"GOGC": "300", "API_AUTH": "disabled"}))
	require.NoError(t, l.Err())
	require.Equal(t, 300, api.GCPercent())
	consumer, l := LoadConsumer(envconf.FromMap(nil))
	require.NoError(t, l.Err())
	require.Equal(t, DefaultGCPercent, consumer.GCPercent())
}
