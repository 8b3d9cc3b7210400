package verify

// Every Redis key this package writes is named here (as asynq's
// internal/base names its keys): one place to read what a code costs in
// Redis and which keys share a Redis Cluster slot.

// key is where the code of (tenant, channel, recipient, purpose) lives. The
// tenant is part of it: each tenant's codes, attempts and burned state are
// its own, so that no tenant can burn, replace or probe another's code.
// The hash tag is Tag: on a Redis Cluster the code shares a slot with the
// same tenant's per-recipient limits and cooldowns.
func (s *Store) key(tenant, channel, recipient, purpose string) string {
	return s.cfg.Prefix + "verify:{" + Tag(tenant, channel, recipient) + "}:" + purpose
}

// Tag is what one tenant's keys for one recipient share (the code's key and
// the limiter's per-recipient rules and cooldowns), so that they live in one
// Redis Cluster slot. A tenant name holds no ":" (package apikey), so two
// tenants never share a tag.
func Tag(tenant, channel, recipient string) string {
	return tenant + ":" + channel + ":" + recipient
}
