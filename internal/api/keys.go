package api

// Every Redis key the API names itself is here (as asynq's internal/base
// names its keys). They are the keys of its frequency-control rules and
// cooldowns: the limiter puts each under its own prefix and hash tag
// (ratelimit's keys.go), so these are relative. Codes, records,
// Idempotency-Key entries and claims are named by their own packages.

// The rules and the cooldown of limits.go: a key's and a tenant's own,
// the shared ones, a code's per recipient and per IP, its resend cooldown.
func apiKeyRuleKey(name string) string       { return "apikey:" + name }
func tenantRuleKey(tenant string) string     { return "tenant:" + tenant }
func urgentRuleKey(tenant string) string     { return "tenant-high:" + tenant }
func globalRuleKey(channel string) string    { return "global:" + channel }
func recipientRuleKey(tag string) string     { return "verify:recipient:" + tag }
func allTenantsRuleKey(all string) string    { return "verify:recipient-all:" + all }
func ipRuleKey(tenant, ip string) string     { return "verify:ip:" + tenant + ":" + ip }
func cooldownKey(tag, purpose string) string { return "verify:cooldown:" + tag + ":" + purpose }
