package claim

// The Redis keys, and key values, of claims, in one place (as asynq's
// internal/base does). The acquire script spells the lease prefix too:
// its 'lease:' must stay leasePrefix.

// VerificationKey is the key of one verification code sent to recipient for
// purpose, by the task taskID. codeDigest must be a digest (e.g. HMAC) of
// the code: the key is readable by anyone with Redis access.
//
// Claim keys carry the task's hash tag, as status records do (status.Store),
// so that on a Redis Cluster a claim and its task's status update run as
// one script; the tag comes before the recipient, so that a '{' in an
// address cannot take its place.
func (c *Claimer) VerificationKey(channel, recipient, codeDigest, purpose, taskID string) string {
	return c.cfg.Prefix + channel + ":sent:mq:{" + taskID + "}:" + recipient + ":" + codeDigest + ":" + purpose
}

// TaskKey is the key of one task (a notification with a task id).
func (c *Claimer) TaskKey(channel, taskID string) string {
	return c.cfg.Prefix + channel + ":sent:task:{" + taskID + "}"
}

// Values: "lease:<token>:<owner>" while claimed, "sent:<owner>:<unix ms>"
// once sent. Any other value (a legacy SETNX marker) counts as sent: when in
// doubt, do not send twice.
const leasePrefix = "lease:"
