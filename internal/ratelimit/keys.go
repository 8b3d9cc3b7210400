package ratelimit

// Every Redis key this package writes is named here (as asynq's
// internal/base names its keys), each under the prefix its owner was
// given (REDIS_PREFIX). A key's hash tag ({...}) is the slot it lives in
// on a Redis Cluster: a script may only touch keys of one slot, so what
// one script reads and writes together shares a tag.

// Each rule key's hash tag is what it protects (a recipient, an IP, an API
// key, a global limit), so that a Redis Cluster spreads the limits over
// its shards; a rule and a cooldown with the same tag share a slot, so
// that one script checks both atomically. "log:" and "cooldown:" keep rule
// and cooldown keys apart.
func (l *Limiter) logKey(tag, k string) string {
	return l.prefix + "ratelimit:{" + tagOr(tag, k) + "}:log:" + k
}
func (l *Limiter) counterKey(tag, k string) string {
	return l.prefix + "ratelimit:{" + tagOr(tag, k) + "}:ctr:" + k
}
func (l *Limiter) markKey(tag, id string) string {
	return l.prefix + "ratelimit:{" + tag + "}:rsv:" + id
}
func (l *Limiter) cooldownKey(tag, k string) string {
	return l.prefix + "ratelimit:{" + tagOr(tag, k) + "}:cooldown:" + k
}

func tagOr(tag, key string) string {
	if tag == "" {
		return key
	}
	return tag
}

// onceKey is an Idempotency-Key's entry (Once); its lease is the same key
// with onceLeaseSuffix, in the same slot.
func (l *Limiter) onceKey(k string) string { return l.prefix + "idem:{" + k + "}" }

const onceLeaseSuffix = ":lease"

// OnceKey is the full Redis key of the entry with key k (Once.Key), for
// Release after a Take that failed without a Reservation.
func (l *Limiter) OnceKey(k string) string { return l.onceKey(k) }

// key is an account's rate, under the account's own hash tag: on a Redis
// Cluster each account lives in its own slot instead of every account
// sharing one.
func (a *Adaptive) key(account string) string {
	return a.prefix + "ratelimit:{adaptive:" + account + "}:rate"
}

// The source is the key's hash tag: one key per script, and sources
// spread over a cluster's shards.
func (f *Failures) key(src string) string {
	return f.prefix + "authfail:{" + src + "}"
}

// configsKey is the hash of the admin-managed Configs (ConfigStore), and
// configsChannel the Pub/Sub channel that says one changed.
func configsKey(prefix string) string     { return prefix + "ratelimit:configs" }
func configsChannel(prefix string) string { return prefix + "ratelimit:configs:changed" }

// configRuleKey is the Rule.Key of a Config (limiter-relative: logKey and
// counterKey put it under the prefix). It is the config id, so editing the
// limits keeps the history already counted.
func configRuleKey(id string) string { return "config:" + id }
