package verify

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/seal"
)

// Config configures a Store.
type Config struct {
	Prefix      string        // Redis key prefix
	CodeLength  int           // digits; default 6, 4..10
	TTL         time.Duration // validity; default 10m
	MaxAttempts int           // wrong guesses before the code is burned; default 5
}

// Validate fills defaults and checks ranges.
func (c *Config) Validate() error {
	c.CodeLength = cmp.Or(c.CodeLength, 6)
	c.TTL = cmp.Or(c.TTL, 10*time.Minute)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, 5)
	switch {
	case c.CodeLength < 4 || c.CodeLength > 10:
		return fmt.Errorf("verify: code length %d not in 4..10", c.CodeLength)
	case c.TTL < time.Second:
		return fmt.Errorf("verify: TTL %s below 1s", c.TTL)
	case c.MaxAttempts < 1 || c.MaxAttempts > 100:
		return fmt.Errorf("verify: max attempts %d not in 1..100", c.MaxAttempts)
	}
	return nil
}

// Store issues and checks codes.
type Store struct {
	rdb  redis.UniversalClient
	keys *seal.Keys
	cfg  Config
}

// New returns a Store.
func New(rdb redis.UniversalClient, keys *seal.Keys, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Store{rdb: rdb, keys: keys, cfg: cfg}, nil
}

// TTL returns how long a code stays valid.
func (s *Store) TTL() time.Duration { return s.cfg.TTL }

// Digest is the keyed digest of a code in its context, the tenant included:
// a code issued for one tenant never matches in another's.
func (s *Store) Digest(tenant, channel, recipient, purpose, code string) string {
	return s.keys.Digest(tenant, channel, recipient, purpose, code)
}

// Generate returns a uniformly random code of the configured length.
func (s *Store) Generate() (string, error) {
	var b [8]byte
	return s.code(func() ([]byte, error) {
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("verify: random: %w", err)
		}
		return b[:], nil
	})
}

// For is the code of the request with task id taskID when that request
// carries an Idempotency-Key: a keyed digest of the id, so a retry after an
// ambiguous failure (the first copy may be queued) issues the very code the
// first attempt sealed. The two copies then share their claim (task id and
// code digest) and one is mailed, with a code that verifies. It is as
// unpredictable as a random code to anyone without CODE_SECRET: the task id
// the caller sees is only the digest's input.
func (s *Store) For(taskID string) string {
	sum, _ := hex.DecodeString(s.keys.Digest("msgpulse idempotent code v1", taskID))
	n := 0
	code, err := s.code(func() ([]byte, error) {
		if n+8 > len(sum) { // 4 draws all rejected: about never; go on from a digest of the digest
			sum, _ = hex.DecodeString(s.keys.Digest("msgpulse idempotent code v1", hex.EncodeToString(sum)))
			n = 0
		}
		n += 8
		return sum[n-8 : n], nil
	})
	if err != nil { // the draw above never fails
		panic(err)
	}
	return code
}

// code draws 8-byte values from next until one is below the largest
// multiple of 10^CodeLength, and writes it as CodeLength digits.
func (s *Store) code(next func() ([]byte, error)) (string, error) {
	// One uniform draw below 10^n by rejection sampling (no modulo bias);
	// a digit at a time through big.Int cost n draws and a dozen
	// allocations.
	limit := uint64(1)
	for range s.cfg.CodeLength {
		limit *= 10
	}
	top := math.MaxUint64 - math.MaxUint64%limit
	for {
		b, err := next()
		if err != nil {
			return "", err
		}
		if v := binary.LittleEndian.Uint64(b); v < top {
			out := make([]byte, s.cfg.CodeLength)
			v %= limit
			for i := len(out) - 1; i >= 0; i-- {
				out[i] = byte('0' + v%10)
				v /= 10
			}
			return string(out), nil
		}
	}
}

// Issued is a freshly stored code. Code is returned once, and never
// stored; Sealed is the code as the message that carries it holds it.
type Issued struct {
	Code      string
	Sealed    string // Code sealed for that message, its task id as associated data (seal.Keys.Seal)
	Digest    string
	TaskID    string
	ExpiresAt time.Time

	key  string
	prev []string // the replaced code's fields and expiry, for rollback
}

// Key is the key the code is stored under, for a caller that must make
// the write durable (rdb.Fence.Wait).
func (iss *Issued) Key() string { return iss.key }

// Issue generates a code, stores its digest, and returns it.
func (s *Store) Issue(ctx context.Context, tenant, channel, recipient, purpose, taskID string) (*Issued, error) {
	iss, err := s.Draft(tenant, channel, recipient, purpose, taskID, false)
	if err != nil {
		return nil, err
	}
	// One MULTI/EXEC: the old code is read and replaced atomically.
	cmds, stored := s.IssueWith(iss)
	p := s.rdb.TxPipeline()
	queued := make([]*redis.Cmd, len(cmds))
	for i, c := range cmds {
		queued[i] = c.Do(ctx, p)
	}
	_, _ = p.Exec(ctx) // each reply is read below
	replies := make([]any, len(queued))
	for i, q := range queued {
		v, err := q.Result()
		if err != nil {
			return nil, fmt.Errorf("verify: store code: %w", err)
		}
		replies[i] = v
	}
	if err := stored(replies); err != nil {
		return nil, err
	}
	return iss, nil
}

// Draft is the code of the request with task id taskID, sealed for the
// message that carries it, and not stored yet (IssueWith stores it).
// Without an Idempotency-Key (keyed false) it is a random code. Under one
// it is For(taskID), so that a retry of an ambiguous failure (its first
// copy may be queued) seals the same code: the two copies are one claim,
// one message, a code that works.
func (s *Store) Draft(tenant, channel, recipient, purpose, taskID string, keyed bool) (*Issued, error) {
	code := ""
	if keyed {
		code = s.For(taskID)
	} else {
		var err error
		if code, err = s.Generate(); err != nil {
			return nil, err
		}
	}
	sealed, err := s.keys.Seal(code, taskID)
	if err != nil {
		return nil, err
	}
	exp := time.Now().Add(s.cfg.TTL)
	return &Issued{Code: code, Sealed: sealed, Digest: s.Digest(tenant, channel, recipient, purpose, code), TaskID: taskID, ExpiresAt: exp, key: s.key(tenant, channel, recipient, purpose)}, nil
}

// IssueWith returns the writes that store iss, followed by then (writes of
// other packages that belong with the code, e.g. its status record), for
// whoever runs them atomically and in order in one round trip: a
// MULTI/EXEC (Issue) or another package's script
// (ratelimit.Request.Then). stored takes every reply of those writes, in
// order; until it returns nil, iss cannot be rolled back.
//
// The code's writes replace the code for its (tenant, channel, recipient,
// purpose), reading the old one first so that a failed publish can put it
// back: the user may still hold it.
func (s *Store) IssueWith(iss *Issued, then ...rdb.Command) (cmds []rdb.Command, stored func(replies []any) error) {
	cmds = []rdb.Command{
		{"HGETALL", iss.key},
		{"PEXPIRETIME", iss.key},
		{"DEL", iss.key},
		{"HSET", iss.key, "digest", iss.Digest, "taskId", iss.TaskID, "failures", 0, "expiresAt", iss.ExpiresAt.UnixMilli()},
		{"PEXPIRE", iss.key, s.cfg.TTL.Milliseconds()},
	}
	own := len(cmds)
	cmds = append(cmds, then...)
	return cmds, func(replies []any) error {
		if len(replies) != len(cmds) {
			return fmt.Errorf("verify: store code: %d replies, want %d", len(replies), len(cmds))
		}
		iss.remember(replies[:own])
		return nil
	}
}

// remember keeps what the code's writes replaced (the replies of
// HGETALL and PEXPIRETIME), for Rollback to put back.
func (iss *Issued) remember(replies []any) {
	iss.prev = nil
	switch old := replies[0].(type) {
	case []any: // RESP2, and any script's reply
		for _, v := range old {
			str, _ := v.(string)
			iss.prev = append(iss.prev, str)
		}
	case map[any]any: // a pipeline on a RESP3 connection
		for k, v := range old {
			ks, _ := k.(string)
			vs, _ := v.(string)
			iss.prev = append(iss.prev, ks, vs)
		}
	}
	if len(iss.prev) > 0 {
		pexp, _ := replies[1].(int64)
		iss.prev = append(iss.prev, "pexpireat", strconv.FormatInt(pexp, 10))
	}
}

// Put back the replaced code, but only if the current one is still ours: a
// newer request may have replaced it meanwhile, and that one wins.
var rollbackScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'taskId') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
local n = #ARGV
if n < 3 then return 1 end
local pexp = tonumber(ARGV[n])
local now = redis.call('TIME')
local nowms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
if pexp == nil or pexp <= nowms then return 1 end
for i = 2, n - 2, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i+1]) end
redis.call('PEXPIREAT', KEYS[1], pexp)
return 2
`)

// Rollback removes an issued code and restores the one it replaced, if that
// has not expired. It is a no-op if a newer code replaced this one.
func (s *Store) Rollback(ctx context.Context, iss *Issued) error {
	if err := rollbackScript.Run(ctx, s.rdb, []string{iss.key}, rollbackArgs(iss)...).Err(); err != nil {
		return fmt.Errorf("verify: rollback: %w", err)
	}
	return nil
}

// QueueRollback is Rollback queued on p, for a caller that undoes several
// things in one round trip; the returned function reports the outcome once
// p has run. EVAL, not EVALSHA: a Redis that forgot the script cannot
// answer NOSCRIPT, and a rollback must not need a second round trip.
func (s *Store) QueueRollback(ctx context.Context, p redis.Pipeliner, iss *Issued) func() error {
	cmd := rollbackScript.Eval(ctx, p, []string{iss.key}, rollbackArgs(iss)...)
	return func() error {
		if err := cmd.Err(); err != nil {
			return fmt.Errorf("verify: rollback: %w", err)
		}
		return nil
	}
}

// rollbackArgs are rollbackScript's arguments for iss.
func rollbackArgs(iss *Issued) []any {
	args := []any{iss.TaskID}
	for i := 0; i+1 < len(iss.prev); i += 2 {
		if iss.prev[i] == "pexpireat" {
			continue
		}
		args = append(args, iss.prev[i], iss.prev[i+1])
	}
	for i := 0; i+1 < len(iss.prev); i += 2 {
		if iss.prev[i] == "pexpireat" {
			args = append(args, iss.prev[i+1])
		}
	}
	return args
}

// Result of a check.
type Result struct {
	Valid        bool
	AttemptsLeft int
	// Burned is true when this wrong guess used the last attempt: the code
	// can no longer be used and a new one must be requested.
	Burned bool
	// Locked is true when earlier guesses burned the code, until it would
	// have expired (or a new one is issued): the caller can tell a
	// locked-out user from a mistyped code.
	Locked bool
}

// Tally counts a verified code in a counter hash (the fraud guard's
// verified codes of a phone-number prefix, ratelimit.Guard.Verified): one
// more in the fixed window of each length that now falls in, fields
// "length ms:index" as ratelimit's counters have them, with now the Redis
// time plus Offset (ratelimit.Limiter.ClockOffset, 0 outside tests).
type Tally struct {
	Key     string
	Windows []time.Duration
	Offset  time.Duration
}

func (t *Tally) args() []any {
	args := []any{t.Offset.Milliseconds()}
	for _, w := range t.Windows {
		args = append(args, w.Milliseconds())
	}
	return args
}

// tallyLua adds one to KEYS[k]'s fields for ARGV[j+1..] (window lengths)
// at Redis time plus ARGV[j] (the offset), and keeps the hash for two of
// its longest window. As ratelimit's counter does (the guard reads this
// hash with it), a tally that starts a window drops the fields older than
// the previous one: a prefix verified at least once every two windows
// would otherwise keep the hash alive and growing by a field a window.
const tallyLua = `
local function tally(k, j)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[j])
  local keep, started = 0, false
  for i = j + 1, #ARGV do
    local len = tonumber(ARGV[i])
    if redis.call('HINCRBY', KEYS[k], string.format('%d:%d', len, math.floor(now / len)), 1) == 1 then started = true end
    if 2 * len > keep then keep = 2 * len end
  end
  if started and redis.call('HLEN', KEYS[k]) > 2 * (#ARGV - j) then
    for _, f in ipairs(redis.call('HKEYS', KEYS[k])) do
      local len, idx = string.match(f, '^(%d+):(%d+)$')
      if len == nil or tonumber(idx) < math.floor(now / tonumber(len)) - 1 then
        redis.call('HDEL', KEYS[k], f)
      end
    end
  end
  redis.call('PEXPIRE', KEYS[k], string.format('%d', keep))
end
`

// Consume the code only if it is still the one we compared against; with
// a second key, tally it there (Tally's ARGV after the digest), in the
// same script: on one Redis a verified code costs no round trip more.
var consumeScript = redis.NewScript(tallyLua + `
if redis.call('HGET', KEYS[1], 'digest') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if #KEYS > 1 then tally(2, 2) end
return 1
`)

// tallyScript is the tally alone, for a Redis Cluster, where the tally's
// hash and the code are in different slots.
var tallyScript = redis.NewScript(tallyLua + `
tally(1, 1)
return 1
`)

// Count a failure against the code we compared against; burn it at max.
// A burned code loses its digest (nothing can match it any more) but keeps
// its key, marked burned, until its own expiry: later checks must still
// answer "too many attempts", not "wrong code", or a locked-out user would
// look like one who mistyped. A new code replaces the whole hash.
var failScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'digest') ~= ARGV[1] then return -1 end
local f = redis.call('HINCRBY', KEYS[1], 'failures', 1)
if f >= tonumber(ARGV[2]) then
  redis.call('HDEL', KEYS[1], 'digest')
  redis.call('HSET', KEYS[1], 'burned', '1')
end
return f
`)

// Check verifies code against tenant's code. A correct code is consumed
// (single use), and counted in tally when one is given: by the consume
// script itself on one Redis, right after it on a Redis Cluster (where a
// failed tally is returned with the valid Result: the code was consumed).
// A wrong one counts against the code's attempts. Another tenant's code
// for the same recipient is never read or touched.
func (s *Store) Check(ctx context.Context, tenant, channel, recipient, purpose, code string, tally *Tally) (Result, error) {
	key := s.key(tenant, channel, recipient, purpose)
	stored, err := s.rdb.HMGet(ctx, key, "digest", "failures", "burned").Result()
	if err != nil {
		return Result{}, fmt.Errorf("verify: read code: %w", err)
	}
	digest, _ := stored[0].(string)
	if burned, _ := stored[2].(string); burned == "1" {
		return Result{Locked: true}, nil
	}
	if digest == "" {
		return Result{Valid: false, AttemptsLeft: 0}, nil
	}
	failures, _ := strconv.Atoi(fmt.Sprint(stored[1]))
	if seal.Equal(s.Digest(tenant, channel, recipient, purpose, code), digest) {
		keys, args := []string{key}, []any{digest}
		_, cluster := rdb.AsCluster(s.rdb)
		if tally != nil && !cluster {
			keys, args = append(keys, tally.Key), append(args, tally.args()...)
		}
		ok, err := consumeScript.Run(ctx, s.rdb, keys, args...).Int()
		if err != nil {
			return Result{}, fmt.Errorf("verify: consume code: %w", err)
		}
		if ok == 1 {
			res := Result{Valid: true, AttemptsLeft: s.cfg.MaxAttempts - failures}
			if tally != nil && cluster {
				if err := tallyScript.Run(ctx, s.rdb, []string{tally.Key}, tally.args()...).Err(); err != nil {
					return res, fmt.Errorf("verify: tally the verified code: %w", err)
				}
			}
			return res, nil
		}
		// A concurrent check consumed it, or a new code replaced it.
		return Result{Valid: false, AttemptsLeft: 0}, nil
	}
	f, err := failScript.Run(ctx, s.rdb, []string{key}, digest, s.cfg.MaxAttempts).Int()
	if err != nil {
		return Result{}, fmt.Errorf("verify: count failure: %w", err)
	}
	if f < 0 { // replaced, consumed or burned meanwhile: read it again
		burned, err := s.rdb.HGet(ctx, key, "burned").Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return Result{}, fmt.Errorf("verify: read code: %w", err)
		}
		return Result{Locked: burned == "1"}, nil
	}
	left := max(s.cfg.MaxAttempts-f, 0)
	return Result{Valid: false, AttemptsLeft: left, Burned: left == 0}, nil
}
