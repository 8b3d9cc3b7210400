package dispatch

import (
	"fmt"

	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	mailchannel "github.com/msgpulse/msgpulse/internal/dispatch/mail"
	smschannel "github.com/msgpulse/msgpulse/internal/dispatch/sms"
	wecomchannel "github.com/msgpulse/msgpulse/internal/dispatch/wecom"
	"github.com/msgpulse/msgpulse/internal/receipt/unsub"
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
		chs[topology.Mail] = mailchannel.New(cfg.Mail, cfg.Templates, cfg.Unsubscribe)
	}
	if cfg.SMS != nil {
		chs[topology.SMS] = smschannel.New(cfg.SMS, cfg.Templates, cfg.SMSLookup)
	}
	if cfg.WeCom != nil {
		chs[topology.WeCom] = wecomchannel.New(*cfg.WeCom)
	}
	return chs
}

// unsubscribeLinks makes the List-Unsubscribe links of mail notices from
// PUBLIC_BASE_URL and RECEIPT_SECRET (config checked both); nil without
// PUBLIC_BASE_URL: no unsubscribe headers.
func unsubscribeLinks(r config.Receipts) (*unsub.Links, error) {
	if r.PublicBaseURL == "" {
		return nil, nil
	}
	s, err := unsub.New(r.Secret)
	if err != nil {
		return nil, fmt.Errorf("RECEIPT_SECRET: %w", err)
	}
	return &unsub.Links{Base: r.PublicBaseURL, Signer: s}, nil
}
