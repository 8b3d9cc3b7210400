// Package lookup keeps, for each SMS a vendor accepted, the vendor's
// message id (Twilio's MessageSid, Aliyun's BizId, Tencent's SerialNo)
// and the task it sent, so that a delivery report, which names only the
// vendor's id, can be tied to its message. The consumer writes an entry
// with the message's "sent" (no round trip of its own); the API's SMS
// hooks read it.
//
// An entry lives TTL (72 h by default: longer than the vendors retry
// their reports), so it never grows without bound, whoever's ids it is
// given. It must never store a recipient, a vendor's credentials or a
// report's body: an id and a task id only.
package lookup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultTTL covers the vendors' report retry windows (issue 45: 72 h).
const DefaultTTL = 72 * time.Hour

// ErrNotFound: no task for this vendor message id (never sent by this
// deployment, or older than TTL).
var ErrNotFound = errors.New("lookup: no task for this vendor message id")

// Config configures a Store.
type Config struct {
	Prefix string
	TTL    time.Duration // default DefaultTTL
}

// Store maps vendor message ids to tasks. It is safe for concurrent use.
type Store struct {
	rdb redis.UniversalClient
	cfg Config
}

// New validates cfg and returns a Store.
func New(client redis.UniversalClient, cfg Config) (*Store, error) {
	if cfg.Prefix == "" {
		return nil, errors.New("lookup: Prefix is required")
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < time.Second {
		return nil, fmt.Errorf("lookup: TTL %s: must be at least 1s", cfg.TTL)
	}
	return &Store{rdb: client, cfg: cfg}, nil
}

// putScript is a SET as a script, so that it can ride in a composite
// (rdb.Composer), which takes scripts only. KEYS: the entry. ARGV: task,
// ttl ms.
var putScript = redis.NewScript(`redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1`)

func check(vendor, messageID string) error {
	switch {
	case vendor == "" || messageID == "":
		return errors.New("lookup: vendor and message id are required")
	case strings.ContainsAny(vendor, "{}") || strings.ContainsAny(messageID, "{}"):
		// A brace would move the key's hash tag.
		return fmt.Errorf("lookup: vendor %q or message id %q holds a brace", vendor, messageID)
	case len(messageID) > 128:
		return fmt.Errorf("lookup: message id of %d bytes: at most 128", len(messageID))
	}
	return nil
}

// QueuePut queues on sc (a pipeline, or the consumer's burst recorder) the
// write that maps vendor's messageID to taskID; the returned function
// reports its outcome once sc has run.
func (s *Store) QueuePut(ctx context.Context, sc redis.Scripter, vendor, messageID, taskID string) (func() error, error) {
	if err := check(vendor, messageID); err != nil {
		return nil, err
	}
	if taskID == "" {
		return nil, errors.New("lookup: task id is required")
	}
	cmd := putScript.Run(ctx, sc, []string{s.key(vendor, messageID)}, taskID, s.cfg.TTL.Milliseconds())
	return func() error {
		if err := cmd.Err(); err != nil {
			return fmt.Errorf("lookup: put %s %q: %w", vendor, messageID, err)
		}
		return nil
	}, nil
}

// Put maps vendor's messageID to taskID for TTL.
func (s *Store) Put(ctx context.Context, vendor, messageID, taskID string) error {
	done, err := s.QueuePut(ctx, s.rdb, vendor, messageID, taskID)
	if err != nil {
		return err
	}
	return done()
}

// Task is the task vendor's messageID was sent for, or ErrNotFound. Any
// other error is Redis's: a hook answers it with "try again".
func (s *Store) Task(ctx context.Context, vendor, messageID string) (string, error) {
	if err := check(vendor, messageID); err != nil {
		return "", fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	id, err := s.rdb.Get(ctx, s.key(vendor, messageID)).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return "", fmt.Errorf("%w: %s %q", ErrNotFound, vendor, messageID)
	case err != nil:
		return "", fmt.Errorf("lookup: %s %q: %w", vendor, messageID, err)
	}
	return id, nil
}
