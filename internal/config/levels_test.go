package config

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/topology"
)

func TestLoadPriorityWeights(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		value string
		want  map[topology.Level]int // nil: an error naming PRIORITY_WEIGHTS
	}{
		{"", map[topology.Level]int{topology.High: 8, topology.Normal: 3, topology.Low: 1}},
		{"10:5:1", map[topology.Level]int{topology.High: 10, topology.Normal: 5, topology.Low: 1}},
		{" 4 : 2 : 1 ", map[topology.Level]int{topology.High: 4, topology.Normal: 2, topology.Low: 1}},
		{"8:3", nil},
		{"8,3,1", nil},
		{"8:0:1", nil},
		{"8:x:1", nil},
		{"8:3:1001", nil},
	} {
		t.Run(tc.value, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{}
			if tc.value != "" {
				env["PRIORITY_WEIGHTS"] = tc.value
			}
			l := envconf.New(envconf.FromMap(env))
			got := loadWeights(l)
			if tc.want == nil {
				require.ErrorContains(t, l.Err(), "PRIORITY_WEIGHTS")
				return
			}
			require.NoError(t, l.Err())
			require.Equal(t, tc.want, got)
		})
	}
}

// Every channel's level bounds are read from variables named after it.
func TestLoadLevelBounds(t *testing.T) {
	t.Parallel()
	l := envconf.New(envconf.FromMap(map[string]string{"MAIL_NORMAL_QUEUE_MAX_LENGTH": "5000", "SMS_LOW_QUEUE_MAX_LENGTH": "7", "WECOM_HIGH_QUEUE_MAX_LENGTH": "9"}))
	c := loadTopology(l)
	require.NoError(t, l.Err())
	def := topology.DefaultLevelMaxLength
	require.Equal(t, map[topology.Level]int{topology.High: def, topology.Normal: 5000, topology.Low: def}, c.Channels[topology.Mail].LevelMaxLength)
	require.Equal(t, map[topology.Level]int{topology.High: def, topology.Normal: def, topology.Low: 7}, c.Channels[topology.SMS].LevelMaxLength)
	require.Equal(t, map[topology.Level]int{topology.High: 9, topology.Normal: def, topology.Low: def}, c.Channels[topology.WeCom].LevelMaxLength)
	for _, ch := range topology.Channels {
		for _, lv := range topology.NoticeLevels {
			require.Contains(t, l.Names(), topology.LevelMaxLengthEnv(ch, lv))
		}
	}
	l = envconf.New(envconf.FromMap(map[string]string{"MAIL_LOW_QUEUE_MAX_LENGTH": "0"}))
	loadTopology(l)
	require.ErrorContains(t, l.Err(), "MAIL_LOW_QUEUE_MAX_LENGTH", "a level queue is always bounded")
}
