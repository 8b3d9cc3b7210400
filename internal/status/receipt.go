package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/msgpulse/msgpulse/internal/redact"
	"github.com/msgpulse/msgpulse/internal/seal"
)

// What a receipt does to a record: the ordering rules, in one script so
// that two receipts, or a receipt and the consumer's own "sent", racing
// on one record agree on where it ends.
//
//   - A receipt state (delivered, undelivered, bounced, complained) applies
//     over every state a message has before it: queued, scheduled,
//     sending, retrying, sent, failed, expired. A receipt can arrive before
//     the consumer wrote "sent" (a crash between the provider's yes and that
//     write), or after a retry of a send the provider had in fact accepted
//     failed.
//   - Nothing but a receipt moves a record out of a receipt state: the
//     update script leaves it untouched (a late "sent" never undoes
//     "delivered").
//   - Among receipt states the first of delivered, undelivered and bounced
//     stays; complained may follow any of them (a complaint comes after
//     the delivery), and nothing follows complained.
//   - delayed and accepted never change the state: they are kept as events.
//   - The same receipt twice changes nothing; every other one is kept as
//     an event, the last MaxEvents of them.

// MaxEvents is how many receipts a record keeps (Record.Events).
const MaxEvents = 10

var (
	// ErrRecipientMismatch: the receipt names a recipient other than the
	// message's (or the record has no recipient digest to check it
	// against). Nothing was changed.
	ErrRecipientMismatch = errors.New("status: the receipt's recipient is not the message's")
	// ErrInvalidReceipt: the receipt's kind is not one ApplyReceipt knows.
	ErrInvalidReceipt = errors.New("status: invalid receipt")
)

// Outcome is what ApplyReceipt did.
type Outcome int

const (
	// Duplicate: the record already kept this very receipt; nothing
	// changed.
	Duplicate Outcome = iota
	// Kept: the receipt was kept as an event; the status stays (a delay
	// notice, a vendor's "accepted", a report after the first one).
	Kept
	// Changed: the receipt moved the record to its state.
	Changed
)

// The receipt kinds that are kept as events and change no state
// (receipt.Delayed, receipt.Accepted).
const (
	EventDelayed  = "delayed"
	EventAccepted = "accepted"
)

// ReceiptUpdate is a receipt as ApplyReceipt applies it.
type ReceiptUpdate struct {
	// Kind is a receipt.Kind's value: a receipt state (State.Receipt),
	// which the record moves to, or EventDelayed or EventAccepted, kept as
	// events only. A string, so that this store stands below the receipt
	// packages that use it.
	Kind string
	// Channel is the message's (the API's name): a receipt for a message
	// of another channel changes nothing (ErrRecipientMismatch).
	Channel string
	Code    string
	Detail  string // redacted before it is stored
	Source  string
	// At is the report's own time; zero means Redis time.
	At time.Time
	// RecipientDigest, when set, makes the receipt apply only to a record
	// whose RecipientDigest is this one (DigestRecipient).
	RecipientDigest string
}

// DigestRecipient is the keyed digest a record keeps of its normalised
// recipient (Record.RecipientDigest): a receipt naming a recipient can be
// checked against the message without the record holding the recipient,
// and a Redis dump does not give the numbers away (a phone number's space
// is small enough to try every one against an unkeyed hash).
func DigestRecipient(keys *seal.Keys, channel, recipient string) string {
	return keys.Digest("msgpulse receipt recipient v1", channel, recipient)
}

// KEYS: the record. ARGV: ttl ms, kind, code, detail, at ms ("" = now),
// source, recipient digest ("" = unchecked), max events, channel ("" =
// unchecked). Returns {0, {}} for no record, {3, {}} for a recipient or
// channel that is not the message's, {1, fields} when the status changed,
// {2, fields} when it did not but the receipt was kept, {4, fields} for a
// duplicate.
var receiptScript = redis.NewScript(luaNow + luaFinal() + `
local key = KEYS[1]
local st = redis.call('HGET', key, 'status')
if not st then return {0, {}} end
if ARGV[7] ~= '' and redis.call('HGET', key, 'recipientDigest') ~= ARGV[7] then return {3, {}} end
if ARGV[9] ~= '' and redis.call('HGET', key, 'channel') ~= ARGV[9] then return {3, {}} end
local kind, code, detail, source = ARGV[2], ARGV[3], ARGV[4], ARGV[6]
local at, stamped = ARGV[5], ARGV[5] ~= ''
if not stamped then at = now end
local events = {}
local raw = redis.call('HGET', key, 'events')
if raw then
  local ok, v = pcall(cjson.decode, raw)
  if ok and type(v) == 'table' then events = v end
end
-- The same report twice (a vendor's retry, a DSN sent again) changes
-- nothing. One without a time of its own matches whatever time it had.
for _, e in ipairs(events) do
  if e.kind == kind and (e.code or '') == code and (e.source or '') == source and (not stamped or e.at == at) then
    return {4, redis.call('HGETALL', key)}
  end
end
local change = receipt[kind] and ((not receipt[st]) or (kind == 'complained' and st ~= 'complained'))
local ev = {kind = kind, at = at}
if code ~= '' then ev.code = code end
if detail ~= '' then ev.detail = detail end
if source ~= '' then ev.source = source end
events[#events + 1] = ev
while #events > tonumber(ARGV[8]) do table.remove(events, 1) end
local kv = {'events', cjson.encode(events), 'updatedAt', now}
local del = {}
if change then
  kv[#kv + 1] = 'status'; kv[#kv + 1] = kind
  for _, f in ipairs({{'receiptCode', code}, {'receiptDetail', detail}, {'receiptSource', source}}) do
    if f[2] == '' then del[#del + 1] = f[1] else kv[#kv + 1] = f[1]; kv[#kv + 1] = f[2] end
  end
  if kind == 'delivered' then kv[#kv + 1] = 'deliveredAt'; kv[#kv + 1] = at end
end
redis.call('HSET', key, unpack(kv))
if #del > 0 then redis.call('HDEL', key, unpack(del)) end
redis.call('PEXPIRE', key, ARGV[1])
if change then return {1, redis.call('HGETALL', key)} end
return {2, redis.call('HGETALL', key)}`)

// ApplyReceipt applies a receipt to taskID's record by the rules above, in
// one script, and returns the record as it left it and what it did.
// ErrNotFound: no such record (nothing is created for a receipt:
// a report about a message this store does not know changes nothing).
// ErrRecipientMismatch: see ReceiptUpdate.RecipientDigest.
func (s *Store) ApplyReceipt(ctx context.Context, taskID string, u ReceiptUpdate) (Record, Outcome, error) {
	if taskID == "" {
		return Record{}, Duplicate, errors.New("status: TaskID is required")
	}
	if !State(u.Kind).Receipt() && u.Kind != EventDelayed && u.Kind != EventAccepted {
		return Record{}, Duplicate, fmt.Errorf("%w: kind %q", ErrInvalidReceipt, u.Kind)
	}
	at := ""
	if !u.At.IsZero() {
		at = strconv.FormatInt(u.At.UnixMilli(), 10)
	}
	out, err := receiptScript.Run(ctx, s.rdb, []string{s.key(taskID)}, s.cfg.TTL.Milliseconds(), u.Kind, u.Code,
		redact.Text(u.Detail), at, u.Source, u.RecipientDigest, MaxEvents, u.Channel).Slice()
	if err != nil {
		return Record{}, Duplicate, fmt.Errorf("status: receipt for %q: %w", taskID, err)
	}
	if len(out) != 2 {
		return Record{}, Duplicate, fmt.Errorf("status: receipt for %q: unexpected reply %v", taskID, out)
	}
	code, _ := out[0].(int64)
	outcome := Duplicate
	switch code {
	case 0:
		return Record{}, Duplicate, fmt.Errorf("%w: %q", ErrNotFound, taskID)
	case 3:
		return Record{}, Duplicate, fmt.Errorf("%w: %q", ErrRecipientMismatch, taskID)
	case 1:
		outcome = Changed
	case 2:
		outcome = Kept
	}
	r, err := parseReply(out[1])
	if err != nil {
		return Record{}, Duplicate, err
	}
	return r, outcome, nil
}

// eventJSON is an Event as the script keeps it: at in unix milliseconds,
// as a string (Lua's cjson would round a number that long).
type eventJSON struct {
	Kind   string `json:"kind"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
	At     string `json:"at"`
	Source string `json:"source"`
}

// parseEvents reads the events field; one it cannot read is left out
// rather than make the record unreadable.
func parseEvents(raw string) []Event {
	if raw == "" {
		return nil
	}
	var in []eventJSON
	if json.Unmarshal([]byte(raw), &in) != nil {
		return nil
	}
	out := make([]Event, 0, len(in))
	for _, e := range in {
		n, err := strconv.ParseInt(e.At, 10, 64)
		if err != nil {
			continue
		}
		out = append(out, Event{Kind: e.Kind, Code: e.Code, Detail: redact.Text(e.Detail), At: time.UnixMilli(n).UTC(), Source: e.Source})
	}
	return out
}
