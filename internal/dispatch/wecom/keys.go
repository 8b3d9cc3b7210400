package wecom

import wecomapi "github.com/msgpulse/msgpulse/internal/provider/wecom"

// The Redis keys the WeCom channel names, in one place (as asynq's
// internal/base does). Each is a key within the Limiter's or the adaptive
// rates' own prefix (REDIS_PREFIX and theirs), never a whole Redis key:
// those packages own their key layout. The accounts' shared state
// (down marks, health) is accountstate's; a media file's cache and lock are
// media's.

// appRateKey names an application's adaptive rate (ratelimit.Adaptive):
// one per corp and agent, whichever account names it.
func appRateKey(app *wecomapi.App) string { return "wecom-app:" + app.Key() }

// robotRateKey names a group robot's adaptive rate.
func robotRateKey(r *wecomapi.Robot) string { return "wecom-robot:" + r.Name }

// adaptiveRuleKey is the Limiter's log of sends held to an adaptive rate.
func adaptiveRuleKey(rateKey string) string { return "adaptive:" + rateKey }

// robotLimitKey is the Limiter's log of a robot's documented 20 posts a
// minute.
func robotLimitKey(r *wecomapi.Robot) string { return "provider:" + wecomapi.RobotName + ":" + r.Name }

// accountLimitKey is the Limiter's log of an application's
// WECOM_ACCOUNT_LIMITS.
func accountLimitKey(account string) string { return "wecom-account:" + account }

// TokenName names an application's access token in the token package's
// keys (shared by every consumer): one per corp and agent, whichever
// account names it, as WeCom issues one per corp and secret.
func TokenName(a wecomapi.Account) string { return "wecom:" + a.Key() }
