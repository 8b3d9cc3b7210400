package suppression

// Every Redis key this package writes is named here, under the prefix its
// owner was given (REDIS_PREFIX). A key's hash tag ({...}) is its slot on
// a Redis Cluster.

// entryKey is one recipient's entry: a hash of reason, code, task and at
// (Unix ms), which the limiter's take script reads (ratelimit.Suppress).
// Its hash tag is the tenant, channel and recipient in the form the API's
// per-recipient limits tag a code's keys with (verify.Tag), so that on a
// Redis Cluster a code's check shares the script of its per-recipient
// limits, and entries spread over the shards.
func (s *Store) entryKey(tenant, channel, recipient string) string {
	return s.prefix + "suppression:{" + tenant + ":" + channel + ":" + recipient + "}"
}

// indexKey is a tenant's list of its entries, for List: a sorted set whose
// members are channel:recipient, all scored 0, so that they page in
// lexical order and a channel is a range. The tenant is its tag: one slot
// per tenant.
func (s *Store) indexKey(tenant string) string {
	return s.prefix + "suppression:index:{" + tenant + "}"
}

// tenantsKey lists the tenants that ever had an entry (members scored 0),
// for the admin's List of every tenant. It holds tenants' names only, as
// many as the tenants an API key names.
func (s *Store) tenantsKey() string { return s.prefix + "suppression:tenants" }
