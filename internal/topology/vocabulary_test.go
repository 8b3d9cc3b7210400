package topology

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestVocabulary(t *testing.T) {
	tests := []struct {
		api, queue, template string
		robot                bool
	}{
		{"email", Mail, "email", false},
		{"sms", SMS, "sms", false},
		{"wecom", WeCom, "wecom", false},
		{"wecom_robot", WeCom, "wecom", true},
	}
	for _, tt := range tests {
		t.Run(tt.api, func(t *testing.T) {
			n, ok := ByAPI(tt.api)
			require.True(t, ok)
			require.Equal(t, Names{API: tt.api, Queue: tt.queue, Template: tt.template, Robot: tt.robot}, n)
			back, ok := ByQueue(tt.queue, tt.robot)
			require.True(t, ok)
			require.Equal(t, n, back, "the queue's name leads back to the same channel")
		})
	}
	for _, bad := range []string{"", "mail", "EMAIL", "push", "robot"} {
		_, ok := ByAPI(bad)
		require.False(t, ok, "%q is not a name callers use", bad)
	}
	_, ok := ByQueue(SMS, true)
	require.False(t, ok, "no SMS robot")
	require.Equal(t, []string{"email", "sms", "wecom", "wecom_robot"}, APINames())
	for _, n := range vocabulary {
		require.True(t, slices.Contains(Channels, n.Queue), "%s travels through a channel of the topology", n.API)
	}
}
