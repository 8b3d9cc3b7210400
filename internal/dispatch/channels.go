package dispatch

import (
	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	mailchannel "github.com/msgpulse/msgpulse/internal/dispatch/mail"
	smschannel "github.com/msgpulse/msgpulse/internal/dispatch/sms"
	wecomchannel "github.com/msgpulse/msgpulse/internal/dispatch/wecom"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// channels registers each topology channel's Channel, built from cfg: the
// one place that names every channel. A topology channel without a
// provider gets one that fails every send for good. Adding a channel
// adds its package and a line here.
func channels(cfg *Config) map[string]channel.Channel {
	chs := map[string]channel.Channel{
		topology.Mail:  channel.Unconfigured{What: "mail"},
		topology.SMS:   channel.Unconfigured{What: "SMS"},
		topology.WeCom: channel.Unconfigured{What: "WeCom"},
	}
	if cfg.Mail != nil {
		chs[topology.Mail] = mailchannel.New(cfg.Mail, cfg.Templates)
	}
	if cfg.SMS != nil {
		chs[topology.SMS] = smschannel.New(cfg.SMS, cfg.Templates, cfg.SMSLookup)
	}
	if cfg.WeCom != nil {
		chs[topology.WeCom] = wecomchannel.New(*cfg.WeCom)
	}
	return chs
}
