package status

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/redact"
)

// State is where a message is in its life.
type State string

const (
	Queued    State = "queued"
	Scheduled State = "scheduled"
	Sending   State = "sending"
	Sent      State = "sent"
	Retrying  State = "retrying"
	Failed    State = "failed"
	Expired   State = "expired"

	// The receipt states: what a provider's report says became of a
	// message after it was sent (receipt.go). Only ApplyReceipt writes
	// them, and no later Update undoes them.
	Delivered   State = "delivered"   // the handset or mailbox took it
	Undelivered State = "undelivered" // the vendor reports it could not be delivered
	Bounced     State = "bounced"     // a mail server reports a permanent failure
	Complained  State = "complained"  // the reader marked it as spam
)

// States are every state, in the order a message usually meets them.
var States = []State{Queued, Scheduled, Sending, Retrying, Sent, Failed, Expired, Delivered, Undelivered, Bounced, Complained}

// Final reports whether s is an outcome: sent, failed, expired or a
// receipt state. A record in a final state never goes back to an earlier
// one (a late "retrying" or "sending" from a delivery that lost its race):
// sent and the receipt states take no Update at all, failed and expired
// only another outcome (a replay's). Only a receipt (ApplyReceipt) moves a
// record on from sent, failed or expired.
func (s State) Final() bool { return slices.Contains(finalStates, s) || s.Receipt() }

// Receipt reports whether s is one of the states only a receipt sets.
func (s State) Receipt() bool { return slices.Contains(receiptStates, s) }

// receiptStates are written into the scripts as finalStates are.
var receiptStates = []State{Delivered, Undelivered, Bounced, Complained}

// finalStates are the outcomes; the update script is written from them.
var finalStates = []State{Sent, Failed, Expired}

// luaFinal is Lua tables of the final states and of the receipt states,
// for the scripts.
func luaFinal() string { return luaSet("final", finalStates) + luaSet("receipt", receiptStates) }

func luaSet(name string, states []State) string {
	var b strings.Builder
	b.WriteString("\nlocal " + name + " = {")
	for i, st := range states {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "[%q] = true", st)
	}
	b.WriteString("}\n")
	return b.String()
}

// Valid reports whether s is one of the states above.
func (s State) Valid() bool {
	return slices.Contains(States, s)
}

var (
	// ErrNotFound: no record for the task (never created, expired or deleted).
	ErrNotFound = errors.New("status: record not found")
	// ErrExists: Create found a record already there.
	ErrExists = errors.New("status: record already exists")
	// ErrFinal: the record has its outcome (State.Final) and the update
	// would have taken it back to an earlier state: it stays as it is.
	ErrFinal = errors.New("status: record is final")
)

// Update changes a record; nil and zero fields are left as they are, and a
// pointer to "" clears that field.
type Update struct {
	Status      State // "" = unchanged
	IncAttempts bool
	LastError   *string
	ErrorClass  *string
	Reason      *string
	Provider    *string
	SentAt      *time.Time // when moving to Sent without it, Redis time is used
	// CallbackURL and RecipientDigest are what a receipt's applier needs
	// later (Record.CallbackURL, Record.RecipientDigest): the consumer
	// writes them with "sending", the write made before every send.
	CallbackURL     *string
	RecipientDigest *string
	// Guard, when set, makes the update apply only while the key Guard.Key
	// holds Guard.Value: a consumer queues its "sending" update in the
	// same pipeline as its idempotency claim, guarded by the claim's
	// lease, so a claim that failed changes nothing. The guard key must
	// hash to the record's slot on a Redis Cluster: the claim keys carry
	// the task's hash tag, as the record's key does (Store.key).
	Guard *Guard
	// Blind skips reading the record back: the update returns a zero
	// Record. For the consumer's hot path, which needs the record only
	// for a callback.
	Blind bool
}

// Guard is a condition on another key; see Update.Guard.
type Guard struct{ Key, Value string }

// ErrGuard: the update was not applied because its Guard did not hold.
var ErrGuard = errors.New("status: guard does not hold; not updated")

// Config configures a Store.
type Config struct {
	Prefix string
	// TTL is how long a record lives after its last change. Default 7 days.
	TTL time.Duration
}

// Validate fills defaults and reports the first invalid setting.
func (c *Config) Validate() error {
	if c.TTL == 0 {
		c.TTL = 7 * 24 * time.Hour
	}
	if c.Prefix == "" {
		return errors.New("status: Prefix is required")
	}
	if c.TTL < time.Second {
		return fmt.Errorf("status: TTL %s: must be at least 1s", c.TTL)
	}
	return nil
}

// Store reads and writes records. It is safe for concurrent use.
type Store struct {
	rdb  redis.UniversalClient
	cfg  Config
	comp *rdb.Composer // CreateBatch's composites
}

// New validates cfg and returns a Store.
func New(client redis.UniversalClient, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Store{rdb: client, cfg: cfg, comp: rdb.NewComposer()}, nil
}

// Times are stamped in the scripts so that every writer uses one clock.
const luaNow = `
local t = redis.call('TIME')
local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
`

// ARGV: ttl ms, then field/value pairs; empty values are not stored, and an
// empty createdAt or updatedAt means now.
var createScript = redis.NewScript(luaNow + `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local kv = {}
for i = 2, #ARGV, 2 do
  local v = ARGV[i + 1]
  if v == '' and (ARGV[i] == 'createdAt' or ARGV[i] == 'updatedAt') then v = now end
  if v ~= '' then kv[#kv + 1] = ARGV[i]; kv[#kv + 1] = v end
end
redis.call('HSET', KEYS[1], unpack(kv))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1`)

// KEYS: the record, then optionally the guard key. ARGV: ttl ms, task id,
// new status (empty keeps it), "1" to count an attempt, the guard's value
// (ignored without a guard key), "1" to read the record back, then
// field/value pairs to set (an empty value deletes the field). Returns {1,
// fields}; for a sent record left untouched {0, fields}; when the guard
// does not hold {2, {}}. fields is empty unless asked for.
//
// A final record is left untouched ({0, fields}) by any update to an
// earlier state, or without one: a "retrying" or "sending" that arrives
// after "failed" or "expired" (issue 38) must not hide the outcome. A sent
// record takes no update at all, nor does one in a receipt state (a late
// "sent" never undoes "delivered"); failed and expired take another
// outcome, the one of a replay from the DLQ.
var updateScript = redis.NewScript(luaNow + luaFinal() + `
local key = KEYS[1]
if KEYS[2] and redis.call('GET', KEYS[2]) ~= ARGV[5] then
  return {2, {}}
end
local back = ARGV[6] == '1'
local st = redis.call('HGET', key, 'status')
if st == 'sent' or receipt[st] or (final[st] and not final[ARGV[3]]) then
  if back then return {0, redis.call('HGETALL', key)} end
  return {0, {}}
end
-- One HSET and at most one HDEL: each redis.call costs more than the
-- field it writes.
local kv = {'updatedAt', now}
if not st and redis.call('EXISTS', key) == 0 then
  -- The message outlived its record (TTL, or a lost Create): start a
  -- minimal one rather than lose the update.
  kv[#kv + 1] = 'taskId'; kv[#kv + 1] = ARGV[2]
  kv[#kv + 1] = 'createdAt'; kv[#kv + 1] = now
  kv[#kv + 1] = 'attempts'; kv[#kv + 1] = '0'
end
if ARGV[3] ~= '' then kv[#kv + 1] = 'status'; kv[#kv + 1] = ARGV[3] end
local del = {}
local hasSentAt = false
for i = 7, #ARGV, 2 do
  if ARGV[i] == 'sentAt' then hasSentAt = true end
  if ARGV[i + 1] == '' then
    del[#del + 1] = ARGV[i]
  else
    kv[#kv + 1] = ARGV[i]; kv[#kv + 1] = ARGV[i + 1]
  end
end
if ARGV[3] == 'sent' and not hasSentAt and redis.call('HEXISTS', key, 'sentAt') == 0 then
  kv[#kv + 1] = 'sentAt'; kv[#kv + 1] = now
end
redis.call('HSET', key, unpack(kv))
if #del > 0 then redis.call('HDEL', key, unpack(del)) end
if ARGV[4] == '1' then redis.call('HINCRBY', key, 'attempts', 1) end
redis.call('PEXPIRE', key, ARGV[1])
if back then return {1, redis.call('HGETALL', key)} end
return {1, {}}`)

// Create stores a new record; ErrExists if there is one. An empty Status is
// Queued; zero CreatedAt and UpdatedAt are set to Redis time.
func (s *Store) Create(ctx context.Context, r Record) error {
	if r.Status == "" {
		r.Status = Queued
	}
	if err := validateRecord(r); err != nil {
		return err
	}
	args := append([]any{s.cfg.TTL.Milliseconds()}, fields(r)...)
	n, err := createScript.Run(ctx, s.rdb, []string{s.key(r.TaskID)}, args...).Int()
	if err != nil {
		return fmt.Errorf("status: create %q: %w", r.TaskID, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %q", ErrExists, r.TaskID)
	}
	return nil
}

// insertScript is InsertCommands as a script, for a Composer. KEYS: the
// record. ARGV: ttl ms, then field/value pairs.
var insertScript = redis.NewScript(`
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1`)

// queueInserts records on rec the scripts that store recs as
// InsertCommands would.
func (s *Store) queueInserts(ctx context.Context, rec *rdb.Recorder, recs []Record) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(recs))
	ttl := s.cfg.TTL.Milliseconds()
	for i, r := range recs {
		key, kv, err := s.insertFields(r)
		if err != nil {
			return nil, err
		}
		cmds[i] = insertScript.Run(ctx, rec, []string{key}, append([]any{ttl}, kv...)...)
	}
	return cmds, nil
}

// LoadScripts loads the script QueueUpdate runs, for pipelines.
func (s *Store) LoadScripts(ctx context.Context) error {
	if err := updateScript.Load(ctx, s.rdb).Err(); err != nil {
		return fmt.Errorf("status: load scripts: %w", err)
	}
	return nil
}

// Get returns the record of a task, or ErrNotFound.
func (s *Store) Get(ctx context.Context, taskID string) (Record, error) {
	m, err := s.rdb.HGetAll(ctx, s.key(taskID)).Result()
	if err != nil {
		return Record{}, fmt.Errorf("status: get %q: %w", taskID, err)
	}
	if len(m) == 0 {
		return Record{}, fmt.Errorf("%w: %q", ErrNotFound, taskID)
	}
	return parse(m)
}

// Update applies u atomically, refreshes the TTL and stamps updatedAt. A
// missing record is created with what u gives. A sent record, and a failed
// or expired one that u would take to an earlier state, is returned
// unchanged with ErrFinal.
func (s *Store) Update(ctx context.Context, taskID string, u Update) (Record, error) {
	done, err := s.QueueUpdate(ctx, s.rdb, taskID, u)
	if err != nil {
		return Record{}, err
	}
	return done()
}

// QueueUpdate is Update through sc, which may be a pipeline; the returned
// function reports the outcome once sc has run. On a pipeline, a script
// Redis has forgotten fails with NOSCRIPT (see LoadScripts).
func (s *Store) QueueUpdate(ctx context.Context, sc redis.Scripter, taskID string, u Update) (func() (Record, error), error) {
	if taskID == "" {
		return nil, errors.New("status: TaskID is required")
	}
	if u.Status != "" && !u.Status.Valid() {
		return nil, fmt.Errorf("status: unknown status %q", u.Status)
	}
	if u.Status.Receipt() {
		return nil, fmt.Errorf("status: %q is a receipt's state: ApplyReceipt sets it", u.Status)
	}
	inc := "0"
	if u.IncAttempts {
		inc = "1"
	}
	keys := []string{s.key(taskID)}
	guard := ""
	if u.Guard != nil {
		keys = append(keys, u.Guard.Key)
		guard = u.Guard.Value
	}
	back := "1"
	if u.Blind {
		back = "0"
	}
	// Sized for every optional field: this runs twice per message.
	args := make([]any, 0, 20)
	args = append(args, s.cfg.TTL.Milliseconds(), taskID, string(u.Status), inc, guard, back)
	if u.LastError != nil {
		// A tenant reads lastError (GET /api/messages, its callback): it
		// never holds a secret, whatever error it was made from.
		args = append(args, fLastError, redact.Text(*u.LastError))
	}
	args = appendField(args, fErrorClass, u.ErrorClass)
	args = appendField(args, fReason, u.Reason)
	args = appendField(args, fProvider, u.Provider)
	args = appendField(args, fCallbackURL, u.CallbackURL)
	args = appendField(args, fRecipientDigest, u.RecipientDigest)
	if u.SentAt != nil {
		args = append(args, fSentAt, ms(*u.SentAt))
	}
	cmd := updateScript.Run(ctx, sc, keys, args...)
	return func() (Record, error) {
		out, err := cmd.Slice()
		if err != nil {
			return Record{}, fmt.Errorf("status: update %q: %w", taskID, err)
		}
		if len(out) != 2 {
			return Record{}, fmt.Errorf("status: update %q: unexpected reply %v", taskID, out)
		}
		code, _ := out[0].(int64)
		switch {
		case code == 2:
			return Record{}, fmt.Errorf("%w: %q", ErrGuard, taskID)
		case u.Blind && code == 0:
			return Record{}, fmt.Errorf("%w: %q", ErrFinal, taskID)
		case u.Blind:
			return Record{}, nil
		}
		r, err := parseReply(out[1])
		if err != nil {
			return Record{}, err
		}
		if code, _ := out[0].(int64); code == 0 {
			return r, fmt.Errorf("%w: %q", ErrFinal, taskID)
		}
		return r, nil
	}, nil
}

// appendField adds a field/value pair to an update's arguments when v is
// set.
func appendField(args []any, name string, v *string) []any {
	if v == nil {
		return args
	}
	return append(args, name, *v)
}

// Delete removes a record; ErrNotFound if there was none.
func (s *Store) Delete(ctx context.Context, taskID string) error {
	n, err := s.rdb.Del(ctx, s.key(taskID)).Result()
	if err != nil {
		return fmt.Errorf("status: delete %q: %w", taskID, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %q", ErrNotFound, taskID)
	}
	return nil
}
