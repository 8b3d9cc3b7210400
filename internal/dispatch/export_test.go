package dispatch

import (
	wecomchannel "github.com/msgpulse/msgpulse/internal/dispatch/wecom"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// AccountResolutions counts the WeCom accounts the dispatcher resolved:
// one per job.
func (d *Dispatcher) AccountResolutions() int64 {
	return d.channels[topology.WeCom].(*wecomchannel.Channel).Resolutions()
}
