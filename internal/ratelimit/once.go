package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/msgpulse/msgpulse/internal/rdb"
)

// Once is the entry that makes a request idempotent (the API's
// Idempotency-Key). It rides in the Take that admits the request, so that a
// request with a key costs no round trip more than one without: the same
// script first reads the entry and, when an earlier request holds it,
// returns an *OnceError without checking or recording anything; else it
// admits the request as usual and, only if it admits it, writes the entry
// as pending with the request's ids.
//
// An entry is in one of three states:
//   - pending: a request holds it. A lease key (Lease) says it is alive;
//     when the lease ran out, its owner died mid-request and the entry
//     counts as released.
//   - done: Finish stored the answer, which any later request gets again.
//   - released: Release gave it up (the request failed). The next request
//     with the same Digest takes it over, but only under the same IDs: the
//     failed request may have published them (a confirm that never came),
//     and the consumer's claim makes two copies of one id one delivery. A
//     Take with other IDs gets an *OnceError naming the ones to use.
type Once struct {
	// Key identifies the entry (without the limiter's prefix); it is its
	// hash tag too, so it must not hold '{' or '}'. The caller puts its
	// tenant in it.
	Key    string
	Digest string        // what the request was: another digest is another request
	IDs    string        // the ids the request publishes under
	Lease  time.Duration // how long a pending entry answers "in progress"
	TTL    time.Duration // how long the entry is kept
}

// Entry states.
const (
	OncePending  = "pending"
	OnceDone     = "done"
	OnceReleased = "released"
)

// ErrOnce is matched (errors.Is) by every *OnceError.
var ErrOnce = errors.New("ratelimit: idempotency key in use")

// OnceError is the entry a Take found under its Once.Key, instead of
// admitting the request.
type OnceError struct {
	Digest string
	State  string // OncePending, OnceDone or OnceReleased
	IDs    string
	// Code and Answer are what Finish stored (done).
	Code   int
	Answer []byte
	// RetryAfter is the rest of a pending entry's lease.
	RetryAfter time.Duration
}

func (e *OnceError) Error() string {
	return fmt.Sprintf("ratelimit: idempotency entry is %s", e.State)
}

// Is makes errors.Is(err, ErrOnce) true.
func (e *OnceError) Is(target error) bool { return target == ErrOnce }

func (o *Once) check() error {
	if o.Key == "" || o.IDs == "" || o.Lease <= 0 || o.TTL <= 0 {
		return errors.New("ratelimit: once: needs a key, ids, a lease and a TTL")
	}
	for _, c := range o.Key {
		if c == '{' || c == '}' {
			return fmt.Errorf("ratelimit: once: key %q holds a brace", o.Key)
		}
	}
	return nil
}

// reserve are the writes that make key pending for o under reservation
// rid: run by the take script only when it admits the request. rid lets a
// second run of the same script (a cluster pipeline sent again after
// NOSCRIPT or a timeout, see takeScript) know the entry as its own.
func (o *Once) reserve(key, rid string) []rdb.Command {
	return []rdb.Command{
		{"HSET", key, "digest", o.Digest, "state", OncePending, "ids", o.IDs, "rid", rid},
		{"PEXPIRE", key, ceilMS(o.TTL)},
		{"SET", key + onceLeaseSuffix, "1", "PX", ceilMS(o.Lease)},
	}
}

// onceHead runs before the take script proper (takeLua) when a request has
// a Once. An entry pending under this very reservation (ARGV[3], the take's
// id) is this request's own, met again by a second run of the script: it
// goes on to the take, which admits again without recording more, instead
// of answering the request's own entry as "in progress" (409). KEYS end
// with the entry and its lease; ARGV[1] is the digest, ARGV[2] the ids, and
// the take script's own arguments follow, which the local ARGV below hands
// it in their usual places.
const onceHead = `
local okey, lkey = KEYS[#KEYS - 1], KEYS[#KEYS]
local e = redis.call('HMGET', okey, 'digest', 'state', 'ids', 'code', 'answer', 'rid')
if e[1] and not (e[2] == 'pending' and e[6] == ARGV[3]) then
  local state = e[2]
  local left = 0
  if state == 'pending' then
    left = redis.call('PTTL', lkey)
    if left <= 0 then state = 'released' end
  end
  if state ~= 'released' or e[1] ~= ARGV[1] or e[3] ~= ARGV[2] then
    return {2, e[1], state or '', e[3] or '', e[4] or '', e[5] or '', left}
  end
end
local ARGV = {unpack(ARGV, 3)}
`

var takeOnceScript = redis.NewScript(onceHead + takeLua)

// priorEntry reads the once script's {2, digest, state, ids, code, answer,
// lease ms} reply; nil for any other.
func priorEntry(raw []any) *OnceError {
	if len(raw) != 7 || raw[0] != int64(2) {
		return nil
	}
	str := func(v any) string { s, _ := v.(string); return s }
	e := &OnceError{Digest: str(raw[1]), State: str(raw[2]), IDs: str(raw[3])}
	e.Code, _ = strconv.Atoi(str(raw[4]))
	if a := str(raw[5]); a != "" {
		e.Answer = []byte(a)
	}
	if ms, _ := raw[6].(int64); ms > 0 && e.State == OncePending {
		e.RetryAfter = time.Duration(ms) * time.Millisecond
	}
	if e.State == "" {
		e.State = OnceReleased
	}
	return e
}

// Finish stores the answer of the request that holds res's entry, for
// every later request with its key, and ends its lease. It is the one
// write a request with an Idempotency-Key adds: the answer exists only
// after the publish, and no write of the request's follows that.
func (l *Limiter) Finish(ctx context.Context, res *Reservation, ttl time.Duration, code int, answer []byte) error {
	if res == nil || res.OnceKey == "" {
		return nil
	}
	_, err := l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, res.OnceKey, "state", OnceDone, "code", code, "answer", answer)
		p.PExpire(ctx, res.OnceKey, ttl)
		p.Del(ctx, res.OnceKey+onceLeaseSuffix)
		return nil
	})
	if err != nil {
		return fmt.Errorf("ratelimit: finish idempotency entry: %w", err)
	}
	return nil
}

// releaseScript gives up a pending entry held under ids (ARGV[1]), keeping
// its digest and ids for the next request. KEYS: the entry, its lease.
// With ARGV[2] == 'forget' it deletes the entry instead: one that the
// request created and that nothing was published under.
var releaseScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'state') == 'pending' and redis.call('HGET', KEYS[1], 'ids') == ARGV[1] then
  if ARGV[2] == 'forget' then
    redis.call('DEL', KEYS[1], KEYS[2])
  else
    redis.call('HSET', KEYS[1], 'state', 'released')
    redis.call('DEL', KEYS[2])
  end
end
return 0
`)

// Release gives up the entry key (Reservation.OnceKey) that a failed
// request held under ids: the next request with the same key and body
// takes it over and publishes under the same ids. The ids are kept, never
// deleted: a publish whose confirm never came may have reached the queue.
// An entry that is done, or that another request holds, is left alone.
func (l *Limiter) Release(ctx context.Context, key, ids string) error {
	if key == "" {
		return nil
	}
	return l.release(ctx, key, ids, "release")
}

func (l *Limiter) release(ctx context.Context, key, ids, how string) error {
	if err := releaseScript.Run(ctx, l.rdb, []string{key, key + onceLeaseSuffix}, ids, how).Err(); err != nil {
		return fmt.Errorf("ratelimit: release idempotency entry: %w", err)
	}
	return nil
}
