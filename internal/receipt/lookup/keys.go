package lookup

// Every Redis key this package writes is named here, under Config.Prefix.

// key maps one vendor message id to its task. The id is the hash tag: a
// Put rides in the consumer's burst (rdb.Composer), which runs one
// composite per hash tag on a Redis Cluster.
func (s *Store) key(vendor, messageID string) string {
	return s.cfg.Prefix + "receipt:vendor:{" + vendor + ":" + messageID + "}"
}
