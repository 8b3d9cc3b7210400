package config

import (
	"time"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/media"
	"github.com/msgpulse/msgpulse/internal/provider/wecom"
)

// The defaults and bounds of the WeCom merge buffer and media pool, which
// dispatch.Config applies to a Config built without this package too.
const (
	DefaultMediaWorkers       = 16
	DefaultMediaTenantWorkers = 4
	MaxMediaWorkers           = 1000
	// The media pool's bytes: what the files it downloads and uploads may
	// hold at once in one consumer, and one tenant's of them (issue 43).
	// A tenant's share takes 3 of the largest files (20 MiB) at once, or 6
	// images; the whole, 3 tenants' shares. Measured, a consumer's resident
	// memory grows by up to about 4 times the media bytes it holds (GOGC
	// 200 lets the heap reach 3 times its live bytes, and freed pages go
	// back to the system later): about 800 MiB at worst for the whole, inside
	// the manifest's 1 Gi, and about 290 MiB for one tenant.
	DefaultMediaMaxBytes       = 192 << 20
	DefaultMediaTenantMaxBytes = 64 << 20
	MaxMediaBytes              = 64 << 30
	MaxMergeHeld               = 60_000
)

// WeComAccounts are the consumer's per-account WeCom settings besides the
// accounts themselves (which are in wecom.Config).
type WeComAccounts struct {
	Limits       map[string]wecom.Limits
	HealthWindow time.Duration
	MergeWindow  time.Duration
	// MergeMax is how many messages the merge buffer holds at most.
	MergeMax int
	// MediaCacheTTL is how long a media_id is reused for the same file.
	MediaCacheTTL time.Duration
	// Media downloads: how many at once, how many of them one tenant's;
	// each one's longest time, slowest rate and grace before the rate
	// holds; each upload's longest time.
	MediaWorkers, MediaTenantWorkers int
	MediaFetchTimeout                time.Duration
	MediaMinRate                     int
	MediaRateWindow                  time.Duration
	MediaUploadTimeout               time.Duration
	// MediaMaxBytes is what media files may hold in the consumer at once,
	// downloading or uploading; MediaTenantMaxBytes one tenant's of it.
	MediaMaxBytes, MediaTenantMaxBytes int
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
	var w WeComAccounts
	w.Limits = loadAccountLimits(l)
	w.HealthWindow = l.Duration("WECOM_HEALTH_WINDOW", 5*time.Minute, 10*time.Second, 24*time.Hour,
		"how far back a WeCom account's health (success rate of its sends) looks; its send rate is its adaptive rate times its health")
	w.MergeWindow = l.Duration("WECOM_MERGE_WINDOW", 100*time.Millisecond, 0, 10*time.Second,
		"single WeCom application messages (not high) with the same account, type and content queued within this of each other go out as one message/send of up to 1000 users (0 = off); a merged send waits at most 10 windows; its messages wait in the merge buffer (WECOM_MERGE_MAX), not in workers")
	w.MergeMax = l.Int("WECOM_MERGE_MAX", wecom.MaxUsers, 1, MaxMergeHeld,
		"messages the WeCom merge buffer holds at most (a full buffer sends its groups at once); the normal and low WeCom queues' prefetch grows by it, each held delivery costing its body (about 1 KB for a notice, at most the API's BODY_LIMIT)")
	w.MediaCacheTTL = l.Duration("WECOM_MEDIA_CACHE_TTL", 60*time.Hour, time.Second, media.MaxCacheTTL,
		"how long the media_id of an uploaded WeCom media file is reused for the same bytes and file name in the same corp (WeCom keeps media 3 days)")
	w.MediaWorkers = l.Int("WECOM_MEDIA_CONCURRENCY", DefaultMediaWorkers, 1, MaxMediaWorkers,
		"WeCom media files downloaded and uploaded at once, in a pool of their own, never in a send worker; 8 per worker may wait (the WeCom queues' prefetch grows by that), more come back later")
	w.MediaTenantWorkers = l.Int("WECOM_MEDIA_TENANT_CONCURRENCY", DefaultMediaTenantWorkers, 1, MaxMediaWorkers,
		"WeCom media downloads one tenant may have at once (at most WECOM_MEDIA_CONCURRENCY): a tenant's slow files slow its own media alone")
	if w.MediaTenantWorkers > w.MediaWorkers {
		l.Fail("WECOM_MEDIA_TENANT_CONCURRENCY", "", "must not exceed WECOM_MEDIA_CONCURRENCY (%d)", w.MediaWorkers)
	}
	w.MediaFetchTimeout = l.Duration("WECOM_MEDIA_FETCH_TIMEOUT", media.DefaultFetchTimeout, time.Second, 10*time.Minute,
		"longest download of a WeCom media file; a longer one fails the message for good (too slow)")
	w.MediaMinRate = l.Int("WECOM_MEDIA_MIN_RATE", media.DefaultMinRate, 1, 1<<30,
		"slowest a WeCom media download may move, in bytes a second on average from its start, once WECOM_MEDIA_RATE_WINDOW has passed; a slower one fails the message for good, naming the slow download")
	w.MediaRateWindow = l.Duration("WECOM_MEDIA_RATE_WINDOW", media.DefaultRateWindow, 100*time.Millisecond, time.Minute,
		"how long a WeCom media download may take before WECOM_MEDIA_MIN_RATE holds it (connecting, the first bytes)")
	if w.MediaRateWindow > w.MediaFetchTimeout {
		l.Fail("WECOM_MEDIA_RATE_WINDOW", "", "must not exceed WECOM_MEDIA_FETCH_TIMEOUT (%s)", w.MediaFetchTimeout)
	}
	w.MediaUploadTimeout = l.Duration("WECOM_MEDIA_UPLOAD_TIMEOUT", media.DefaultUploadTimeout, time.Second, 10*time.Minute,
		"longest upload of a WeCom media file to WeCom, apart from its download and from SEND_TIMEOUT; the same file is uploaded once by the fleet")
	w.MediaMaxBytes = l.Int("WECOM_MEDIA_MAX_BYTES", DefaultMediaMaxBytes, media.MaxFileBytes, MaxMediaBytes,
		"bytes the WeCom media files may hold in one consumer at once, from before their download to the end of their upload (each reserves its kind's limit, 10 or 20 MiB, until downloaded, then its size); a message whose file finds no room comes back 2-3 s later (a snooze), never dropped")
	w.MediaTenantMaxBytes = l.Int("WECOM_MEDIA_TENANT_MAX_BYTES", DefaultMediaTenantMaxBytes, media.MaxFileBytes, MaxMediaBytes,
		"of WECOM_MEDIA_MAX_BYTES, what one tenant's media files may hold at once (at least 20 MiB, the largest file): one tenant's files never take the room of another's")
	if w.MediaTenantMaxBytes > w.MediaMaxBytes {
		l.Fail("WECOM_MEDIA_TENANT_MAX_BYTES", "", "must not exceed WECOM_MEDIA_MAX_BYTES (%d)", w.MediaMaxBytes)
	}
	return w
}

// loadAccountLimits reads WECOM_ACCOUNT_LIMITS: the consumer holds the
// accounts to them, the API and its console show them.
func loadAccountLimits(l *envconf.Loader) map[string]wecom.Limits {
	limits := l.String("WECOM_ACCOUNT_LIMITS", "", "WeCom accounts' sends per second/minute/hour/day: name=s/m/h/d, comma-separated (0 = none), e.g. default=20/600/10000/100000; the consumer holds each account to them, the API shows them (/api/queues/stats, the console)")
	out, err := wecom.ParseLimits(limits)
	if err != nil {
		l.Fail("WECOM_ACCOUNT_LIMITS", limits, "%v", err)
	}
	return out
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
