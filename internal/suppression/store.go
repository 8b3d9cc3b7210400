package suppression

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/msgpulse/msgpulse/internal/phone"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
)

// Config configures a Store.
type Config struct {
	// Prefix starts every key (REDIS_PREFIX).
	Prefix string
	// PageSize is List's page when the caller names none (default 100);
	// MaxPage the largest it may ask for (default 1000).
	PageSize, MaxPage int
}

// Validate fills defaults and reports the first invalid setting.
func (c *Config) Validate() error {
	if strings.ContainsAny(c.Prefix, "{}") {
		return fmt.Errorf("suppression: prefix %q: must not hold '{' or '}' (they are the keys' hash tags)", c.Prefix)
	}
	if c.PageSize == 0 {
		c.PageSize = 100
	}
	if c.MaxPage == 0 {
		c.MaxPage = 1000
	}
	if c.PageSize < 1 || c.MaxPage < c.PageSize {
		return fmt.Errorf("suppression: PageSize %d must be positive and MaxPage %d at least as large", c.PageSize, c.MaxPage)
	}
	return nil
}

// Store keeps the entries in Redis. It is safe for concurrent use; every
// replica of the API and the consumer builds its own.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	cfg    Config
}

// New returns the store.
func New(rdb redis.UniversalClient, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Store{rdb: rdb, prefix: cfg.Prefix, cfg: cfg}, nil
}

// ErrCursor is List's answer to a cursor it did not make, or made for
// another tenant.
var ErrCursor = errors.New("suppression: invalid cursor")

// Suppressible reports whether channel keeps a suppression list: email
// and sms. WeCom has no bounces or opt-outs to keep.
func Suppressible(channel string) bool { return channel == ChannelEmail || channel == ChannelSMS }

// Normalize returns recipient as the API's limits key it: an email
// address lower-cased, a phone number in E.164. Receivers that learn a
// recipient from a DSN or a vendor call it before Add (Add does too).
func Normalize(channel, recipient string) (string, error) {
	r := strings.TrimSpace(recipient)
	switch channel {
	case ChannelEmail:
		if !strings.Contains(r, "@") || strings.ContainsAny(r, " \t\r\n") {
			return "", fmt.Errorf("suppression: %q is not an email address", recipient)
		}
		return strings.ToLower(r), nil
	case ChannelSMS:
		n, err := phone.Parse(r)
		if err != nil {
			return "", fmt.Errorf("suppression: recipient: %w", err)
		}
		return n.E164, nil
	}
	return "", fmt.Errorf("suppression: channel %q keeps no suppression list", channel)
}

// addScript stores an entry unless one is there already that it must not
// replace. ARGV: reason, code, task, at (ms), and "1" when the reason
// stops codes. An entry stays as it is (its first cause and date) unless
// it stops notices only (an unsubscribe) and the new reason stops codes
// too: a hard bounce after an unsubscribe must stop codes as well.
// Returns 1 when it stored the entry.
var addScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], 'reason')
if cur and not (cur == 'unsubscribe' and ARGV[5] == '1') then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'reason', ARGV[1], 'code', ARGV[2], 'task', ARGV[3], 'at', ARGV[4])
return 1
`)

// Add suppresses e.Recipient for e.Tenant on e.Channel. It is idempotent:
// an entry already there keeps its reason, code and date, unless it is
// an unsubscribe (notices only) and e's reason stops codes too, which
// replaces it. e.At zero means now; the recipient is normalised.
//
// The tenant's index is written before the entry, so that an entry is
// always listed; a failure between the two leaves an index member
// without an entry, which List skips, and Add called again completes.
func (s *Store) Add(ctx context.Context, e Entry) error {
	if err := e.Validate(); err != nil {
		return err
	}
	if strings.ContainsAny(e.Tenant, "{}") {
		return fmt.Errorf("suppression: tenant %q: must not hold '{' or '}'", e.Tenant)
	}
	rec, err := Normalize(e.Channel, e.Recipient)
	if err != nil {
		return err
	}
	if e.At.IsZero() {
		e.At = time.Now()
	}
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAddNX(ctx, s.tenantsKey(), redis.Z{Member: e.Tenant})
		p.ZAddNX(ctx, s.indexKey(e.Tenant), redis.Z{Member: e.Channel + ":" + rec})
		return nil
	})
	if err != nil {
		return fmt.Errorf("suppression: add: %w", err)
	}
	codes := "1"
	if e.Reason.NoticesOnly() {
		codes = "0"
	}
	err = addScript.Run(ctx, s.rdb, []string{s.entryKey(e.Tenant, e.Channel, rec)},
		string(e.Reason), e.Code, e.TaskID, strconv.FormatInt(e.At.UnixMilli(), 10), codes).Err()
	if err != nil {
		return fmt.Errorf("suppression: add: %w", err)
	}
	return nil
}

// Remove deletes the entry, and reports whether there was one. The
// recipient is normalised first.
func (s *Store) Remove(ctx context.Context, tenant, channel, recipient string) (bool, error) {
	rec, err := Normalize(channel, recipient)
	if err != nil {
		return false, err
	}
	// The entry first: it is what refuses sends; an index member left
	// by a failure here is skipped by List.
	n, err := s.rdb.Del(ctx, s.entryKey(tenant, channel, rec)).Result()
	if err != nil {
		return false, fmt.Errorf("suppression: remove: %w", err)
	}
	if err := s.rdb.ZRem(ctx, s.indexKey(tenant), channel+":"+rec).Err(); err != nil {
		return n > 0, fmt.Errorf("suppression: remove from the index: %w", err)
	}
	return n > 0, nil
}

// Get returns the entry, and whether there is one.
func (s *Store) Get(ctx context.Context, tenant, channel, recipient string) (Entry, bool, error) {
	rec, err := Normalize(channel, recipient)
	if err != nil {
		return Entry{}, false, err
	}
	m, err := s.rdb.HGetAll(ctx, s.entryKey(tenant, channel, rec)).Result()
	if err != nil {
		return Entry{}, false, fmt.Errorf("suppression: get: %w", err)
	}
	e, ok := entryOf(tenant, channel, rec, m)
	return e, ok, nil
}

func entryOf(tenant, channel, recipient string, m map[string]string) (Entry, bool) {
	if m["reason"] == "" {
		return Entry{}, false
	}
	e := Entry{Tenant: tenant, Channel: channel, Recipient: recipient, Reason: Reason(m["reason"]), Code: m["code"], TaskID: m["task"]}
	if ms, err := strconv.ParseInt(m["at"], 10, 64); err == nil && ms > 0 {
		e.At = time.UnixMilli(ms).UTC()
	}
	return e, true
}

// Check is the limiter's check of a request to recipient (normalised) on
// channel: nil for a channel without a list. A code (code) is refused by
// every reason but an unsubscribe, a notice by every reason.
func (s *Store) Check(tenant, channel, recipient string, code bool) *ratelimit.Suppress {
	if !Suppressible(channel) {
		return nil
	}
	sp := &ratelimit.Suppress{Key: s.entryKey(tenant, channel, recipient)}
	if code {
		sp.Except = []string{string(Unsubscribe)}
	}
	return sp
}

// Refused is the entry a limiter's refusal read (for its Refusal()).
func Refused(tenant, channel, recipient string, se *ratelimit.SuppressedError) Entry {
	return Entry{Tenant: tenant, Channel: channel, Recipient: recipient, Reason: Reason(se.Reason), Code: se.Code, TaskID: se.TaskID, At: se.At}
}

// Filter is what List lists.
type Filter struct {
	// Tenant is whose entries; "" is every tenant's (the admin's).
	Tenant string
	// Channel, when set, is "email" or "sms"; Recipient, when set, is
	// one recipient (normalised for each channel it is looked up in).
	Channel, Recipient string
	// Cursor is a Page's Next, to go on from; "" starts.
	Cursor string
	// Limit is the page's size: 0 is Config.PageSize, at most MaxPage.
	Limit int
}

// Page is one page of entries, ordered by tenant, then channel and
// recipient. Next, when not "", goes on (the page after may be empty).
type Page struct {
	Entries []Entry `json:"entries"`
	Next    string  `json:"next,omitempty"`
}

// tenantsPerPage bounds the tenants one List of every tenant visits.
const tenantsPerPage = 100

// afterAll is a cursor's member past every member of a tenant: members
// start with a channel's name, never with a byte this high.
const afterAll = "\x7f"

// List returns one page of entries. Every read is bounded: a page reads
// at most a few times its size of index members (those whose entry is
// gone are skipped) and at most tenantsPerPage tenants' indexes, and
// then answers a shorter page with a Next.
func (s *Store) List(ctx context.Context, f Filter) (Page, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = s.cfg.PageSize
	}
	limit = min(limit, s.cfg.MaxPage)
	if f.Channel != "" && !Suppressible(f.Channel) {
		return Page{}, fmt.Errorf("suppression: channel %q keeps no suppression list", f.Channel)
	}
	ct, cm, err := decodeCursor(f.Cursor)
	if err != nil {
		return Page{}, err
	}
	if f.Tenant != "" && ct != "" && ct != f.Tenant {
		return Page{}, ErrCursor
	}
	tenants := []string{f.Tenant}
	if f.Tenant == "" {
		start := "-"
		if ct != "" {
			start = "[" + ct
		}
		tenants, err = s.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: s.tenantsKey(), Start: start, Stop: "+", ByLex: true, Count: tenantsPerPage}).Result()
		if err != nil {
			return Page{}, fmt.Errorf("suppression: list tenants: %w", err)
		}
	}
	page := Page{Entries: []Entry{}}
	budget := 4*limit + 16
	for _, t := range tenants {
		after := ""
		if t == ct {
			after = cm
		}
		for {
			members, err := s.members(ctx, t, f, after, min(limit-len(page.Entries), budget))
			if err != nil {
				return Page{}, err
			}
			if len(members) == 0 {
				break
			}
			budget -= len(members)
			entries, err := s.entries(ctx, t, members)
			if err != nil {
				return Page{}, err
			}
			for i, m := range members {
				after = m
				if entries[i] != nil {
					page.Entries = append(page.Entries, *entries[i])
				}
				if len(page.Entries) == limit {
					page.Next = encodeCursor(t, m)
					return page, nil
				}
			}
			if f.Recipient != "" {
				break
			}
			if budget <= 0 {
				page.Next = encodeCursor(t, after)
				return page, nil
			}
		}
	}
	if f.Tenant == "" && len(tenants) == tenantsPerPage {
		page.Next = encodeCursor(tenants[len(tenants)-1], afterAll)
	}
	return page, nil
}

// members are up to n of tenant's index members after after that f
// selects.
func (s *Store) members(ctx context.Context, tenant string, f Filter, after string, n int) ([]string, error) {
	if n <= 0 {
		return nil, nil
	}
	if f.Recipient != "" {
		// One recipient: its member in each channel asked, no index read.
		var out []string
		for _, ch := range []string{ChannelEmail, ChannelSMS} {
			if f.Channel != "" && ch != f.Channel {
				continue
			}
			if rec, err := Normalize(ch, f.Recipient); err == nil && ch+":"+rec > after {
				out = append(out, ch+":"+rec)
			}
		}
		return out, nil
	}
	start, stop := "-", "+"
	if f.Channel != "" {
		start, stop = "["+f.Channel+":", "("+f.Channel+";" // ';' follows ':'
	}
	if after != "" && (f.Channel == "" || after >= f.Channel+":") {
		start = "(" + after
	}
	out, err := s.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: s.indexKey(tenant), Start: start, Stop: stop, ByLex: true, Count: int64(n)}).Result()
	if err != nil {
		return nil, fmt.Errorf("suppression: list: %w", err)
	}
	return out, nil
}

// entries reads the entries of tenant's members (channel:recipient) in
// one pipeline; nil for one that is gone.
func (s *Store) entries(ctx context.Context, tenant string, members []string) ([]*Entry, error) {
	cmds := make([]*redis.MapStringStringCmd, len(members))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, m := range members {
			ch, rec, _ := strings.Cut(m, ":")
			cmds[i] = p.HGetAll(ctx, s.entryKey(tenant, ch, rec))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("suppression: list: %w", err)
	}
	out := make([]*Entry, len(members))
	for i, m := range members {
		ch, rec, _ := strings.Cut(m, ":")
		if e, ok := entryOf(tenant, ch, rec, cmds[i].Val()); ok {
			out[i] = &e
		}
	}
	return out, nil
}

func encodeCursor(tenant, member string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(tenant + "\n" + member))
}

func decodeCursor(c string) (tenant, member string, err error) {
	if c == "" {
		return "", "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return "", "", ErrCursor
	}
	t, m, ok := strings.Cut(string(b), "\n")
	if !ok || t == "" {
		return "", "", ErrCursor
	}
	return t, m, nil
}
