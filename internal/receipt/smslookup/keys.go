package smslookup

// Every Redis key this package writes is named here, under Store's
// prefix.

// key is one vendor message id's entry. The vendor and its id are the
// key's hash tag: one entry is one key, written by one script on its own
// slot, so it works on a Redis Cluster whatever slot the message's status
// record is on. The vendor comes first so that a Twilio SID and an Aliyun
// BizId with the same digits never meet.
func (s *Store) key(vendor, id string) string {
	return s.prefix + "sms:vendorid:{" + vendor + ":" + id + "}"
}

// Key is the key of vendor's id, for a test or an operator's look.
func (s *Store) Key(vendor, id string) string { return s.key(vendor, id) }
