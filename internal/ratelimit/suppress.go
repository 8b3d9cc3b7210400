package ratelimit

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Suppress refuses a request whose recipient is on a suppression list
// (internal/suppression keeps it). It rides in the Take of the request it
// judges, as the Guard does: the same script reads the recipient's entry
// before it records anything, so a send to a suppressed recipient costs
// no round trip more than any other, and records and writes nothing.
//
// The entry is a hash (its owner writes it) with the fields reason, code,
// task and at (Unix ms). The limiter reads them and writes none.
type Suppress struct {
	// Key is the full Redis key of the recipient's entry. On a Redis
	// Cluster its hash tag is its slot: a key with the tag of the
	// request's per-recipient rule is checked by that rule's script, any
	// other by a script of its own in the same pipeline.
	Key string
	// Except are the reasons that do not refuse this request: a
	// verification code is not refused by an unsubscribe.
	Except []string
}

// SuppressedError is a request refused by its Request.Suppress: the
// recipient's entry, as the script read it. It matches ErrLimited: like a
// limit's refusal, it recorded nothing.
type SuppressedError struct {
	Reason string
	Code   string
	TaskID string
	At     time.Time
	// LeftBehind, on a Redis Cluster, is what the refused request's
	// reservations in other slots may still hold (see LimitError).
	LeftBehind *LeftBehind
}

func (e *SuppressedError) Error() string {
	return fmt.Sprintf("ratelimit: recipient is suppressed (%s)", e.Reason)
}

// Is makes errors.Is(err, ErrLimited) true.
func (e *SuppressedError) Is(target error) bool { return target == ErrLimited }

func (s *Suppress) check() error {
	if s.Key == "" {
		return errors.New("ratelimit: suppress: needs its key")
	}
	return nil
}

// args are the check's words in the take script: their count, a marker,
// then the reasons that do not refuse.
func (s *Suppress) args() []any {
	w := []any{1 + len(s.Except), "suppress"}
	for _, r := range s.Except {
		w = append(w, r)
	}
	return w
}

// suppressLua is the take script's suppression check (takeLua), after its
// rules and before the guard: it reads its words at ARGV[a] (a count, 0 =
// no check) and its key after the cooldown and the mark. Unless the script
// runs again for its own reservation (admitted already), an entry whose
// reason is not excepted refuses the request at once, before the guard or
// anything else writes: {1, -2, reason, code, task, at}. supk is how many
// keys it took (the guard's follow).
const suppressLua = `
local nsup = tonumber(ARGV[a]) or 0
local supk = 0
if nsup > 0 then
  supk = 1
  if not again then
    local kb = 2 * nrules
    if cdms > 0 then kb = kb + 1 end
    if markms > 0 then kb = kb + 1 end
    local e = redis.call('HMGET', KEYS[kb + 1], 'reason', 'code', 'task', 'at')
    if e[1] then
      local refuse = true
      for i = a + 2, a + nsup do
        if ARGV[i] == e[1] then refuse = false end
      end
      if refuse then return {1, -2, e[1], e[2] or '', e[3] or '', e[4] or ''} end
    end
  end
  a = a + nsup
end
a = a + 1
`

// suppressedReply reads the script's {1, -2, reason, code, task, at}
// refusal; nil for any other reply.
func suppressedReply(raw []any) *SuppressedError {
	if len(raw) != 6 || raw[0] != int64(1) || raw[1] != int64(-2) {
		return nil
	}
	str := func(v any) string { s, _ := v.(string); return s }
	e := &SuppressedError{Reason: str(raw[2]), Code: str(raw[3]), TaskID: str(raw[4])}
	if ms, err := strconv.ParseInt(str(raw[5]), 10, 64); err == nil && ms > 0 {
		e.At = time.UnixMilli(ms).UTC()
	}
	return e
}
