package accountstate

import "strconv"

// The Redis keys of the accounts' shared state, in one place (as asynq's
// internal/base does). prefix is REDIS_PREFIX. Each account's keys share a
// hash tag: one Redis Cluster slot per account.

func accountKey(prefix, account, what string) string {
	return prefix + "wecom:account:{" + account + "}:" + what
}

// downKey holds why the account is down, expiring when it may be tried
// again.
func downKey(prefix, account string) string { return accountKey(prefix, account, "down") }

// rateKey holds the account's last noted send rate, for the stats.
func rateKey(prefix, account string) string { return accountKey(prefix, account, "rate") }

// sendsKey counts the account's sends (all, ok) in one bucket of its
// health window.
func sendsKey(prefix, account string, bucket int64) string {
	return accountKey(prefix, account, "sends:"+strconv.FormatInt(bucket, 10))
}
