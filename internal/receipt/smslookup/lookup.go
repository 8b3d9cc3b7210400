// Package smslookup keeps, for each SMS a vendor accepted, the vendor's
// message id (Twilio's sid, Aliyun's BizId, Tencent's SerialNo) → the
// message's taskId and the E.164 number it went to, for 72 hours: the
// vendors' delivery reports name only their own id and the number, and the
// SMS hooks (internal/receipt/smshook) find the message through it.
//
// The consumer writes an entry with the message's sent mark, in the same
// round trip (QueuePut on the burst's recorder); the API's hooks read it.
//
// What it must never do: keep anything past its TTL (every write sets
// one, so nothing a vendor or a caller sends grows without bound), keep a
// message's text or parameters, or decide anything: a miss is the hook's
// to answer.
package smslookup

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// TTL is how long an entry lives: Twilio retries a status callback and
// Aliyun and Tencent push late reports (a handset off for a day, a
// vendor's retries of a push we could not take); 72 h covers them.
const TTL = 72 * time.Hour

// maxID bounds a vendor id in a key: vendors' ids are 34 characters
// (Twilio) or fewer; a longer one is not a vendor's and is not stored.
const maxID = 128

// Entry is what a vendor message id names.
type Entry struct {
	TaskID    string
	Recipient string // E.164, as the message was sent
}

// Store reads and writes the entries under a Redis key prefix.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	ttl    time.Duration
}

// New returns a Store on c under prefix (REDIS_PREFIX, as the other
// stores).
func New(c redis.UniversalClient, prefix string) *Store {
	return &Store{rdb: c, prefix: prefix, ttl: TTL}
}

// putScript sets one entry with its TTL. A script, not a SET, so that it
// rides the consumer's composite scripts (rdb.Composer): the sent mark's
// round trip carries it.
var putScript = redis.NewScript(`return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])`)

// ErrBadEntry: an entry that cannot be stored (no vendor, id or task, an
// id too long or with a blank).
var ErrBadEntry = errors.New("smslookup: bad entry")

func valid(vendor, id string, e Entry) bool {
	return vendor != "" && id != "" && len(id) <= maxID && e.TaskID != "" &&
		!strings.ContainsAny(id, " \t\r\n{}") && !strings.Contains(e.TaskID, "\n")
}

func encode(e Entry) string { return e.TaskID + "\n" + e.Recipient }

// QueuePut queues the entry's write on p (a pipeline, or the consumer's
// burst recorder) and returns what reports its outcome once p ran.
func (s *Store) QueuePut(ctx context.Context, p redis.Scripter, vendor, id string, e Entry) func() error {
	if !valid(vendor, id, e) {
		return func() error { return ErrBadEntry }
	}
	cmd := putScript.Run(ctx, p, []string{s.key(vendor, id)}, encode(e), strconv.FormatInt(s.ttl.Milliseconds(), 10))
	return func() error {
		if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		return nil
	}
}

// Put writes the entry in its own round trip.
func (s *Store) Put(ctx context.Context, vendor, id string, e Entry) error {
	return s.QueuePut(ctx, s.rdb, vendor, id, e)()
}

// Get returns the entry of vendor's id; ok is false when there is none
// (never sent by us, or older than TTL). err is Redis's.
func (s *Store) Get(ctx context.Context, vendor, id string) (e Entry, ok bool, err error) {
	if !valid(vendor, id, Entry{TaskID: "x"}) {
		return Entry{}, false, nil
	}
	v, err := s.rdb.Get(ctx, s.key(vendor, id)).Result()
	if errors.Is(err, redis.Nil) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, err
	}
	task, rcpt, found := strings.Cut(v, "\n")
	if !found || task == "" {
		return Entry{}, false, nil
	}
	return Entry{TaskID: task, Recipient: rcpt}, true, nil
}
