package config

import (
	"time"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/media"
	"github.com/msgpulse/msgpulse/internal/provider/wecom"
)

// WeComAccounts are the consumer's per-account WeCom settings besides the
// accounts themselves (which are in wecom.Config).
type WeComAccounts struct {
	Limits       map[string]wecom.Limits
	HealthWindow time.Duration
	MergeWindow  time.Duration
	// MediaCacheTTL is how long a media_id is reused for the same file.
	MediaCacheTTL time.Duration
}

const accountsHelp = "WeCom application accounts: name=corpid:agentid:secret or name=corpid:agentid:secret@tenant+tenant, comma-separated; " +
	"an account with tenants listed serves them alone, without, every tenant (a request names one in \"account\"; else the first listing its tenant, else default = WECOM_CORP_ID/WECOM_CORP_SECRET/WECOM_AGENT_ID). " +
	"The API needs the same names and tenants (there the secret may be left out: name=corpid:agentid@tenant)"

// loadAccountList reads the consumer's WECOM_ACCOUNTS.
func loadAccountList(l *envconf.Loader) []wecom.Account {
	list, err := wecom.ParseAccounts(l.Secret("WECOM_ACCOUNTS", "", accountsHelp), true)
	if err != nil {
		l.Fail("WECOM_ACCOUNTS", "", "%v", err)
	}
	return list
}

// loadWeComAccounts reads the accounts' limits and health window.
func loadWeComAccounts(l *envconf.Loader) WeComAccounts {
	var err error
	var w WeComAccounts
	limits := l.String("WECOM_ACCOUNT_LIMITS", "", "WeCom accounts' sends per second/minute/hour/day: name=s/m/h/d, comma-separated (0 = none), e.g. default=20/600/10000/100000")
	if w.Limits, err = wecom.ParseLimits(limits); err != nil {
		l.Fail("WECOM_ACCOUNT_LIMITS", limits, "%v", err)
	}
	w.HealthWindow = l.Duration("WECOM_HEALTH_WINDOW", 5*time.Minute, 10*time.Second, 24*time.Hour,
		"how far back a WeCom account's health (success rate of its sends) looks; its send rate is its adaptive rate times its health")
	w.MergeWindow = l.Duration("WECOM_MERGE_WINDOW", 100*time.Millisecond, 0, 10*time.Second,
		"single WeCom application messages (not high) with the same account, type and content queued within this of each other go out as one message/send of up to 1000 users (0 = off); a merged send waits at most 10 windows, and holds at most the channel's workers")
	w.MediaCacheTTL = l.Duration("WECOM_MEDIA_CACHE_TTL", 60*time.Hour, time.Second, media.MaxCacheTTL,
		"how long the media_id of an uploaded WeCom media file is reused for the same bytes in the same corp (WeCom keeps media 3 days)")
	return w
}

// loadAPIWeComAccounts reads WECOM_ACCOUNTS for the API, which checks who
// may send from which account and shows the accounts' state: the names,
// corp and agent ids and tenants; secrets are dropped here.
func loadAPIWeComAccounts(l *envconf.Loader) []wecom.Account {
	list, err := wecom.ParseAccounts(l.Secret("WECOM_ACCOUNTS", "", accountsHelp), false)
	if err != nil {
		l.Fail("WECOM_ACCOUNTS", "", "%v", err)
		return nil
	}
	for i := range list {
		list[i].Secret = ""
	}
	return list
}
