package suppression_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/suppression"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

type env struct {
	ctx   context.Context
	store *suppression.Store
	r     *testenv.Redis
}

func setup(t *testing.T, cfg suppression.Config) env {
	t.Helper()
	r := testenv.NewRedis(t)
	cfg.Prefix = r.Prefix
	s, err := suppression.New(r.Client, cfg)
	require.NoError(t, err)
	return env{ctx: testenv.Context(t, 30*time.Second), store: s, r: r}
}

var day = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)

func entry(tenant, channel, recipient string, reason suppression.Reason) suppression.Entry {
	return suppression.Entry{Tenant: tenant, Channel: channel, Recipient: recipient, Reason: reason, Code: "5.1.1", TaskID: "t-1", At: day}
}

func TestAddGetRemove(t *testing.T) {
	e := setup(t, suppression.Config{})
	// Stored under its normalised recipient, found by any spelling of it.
	require.NoError(t, e.store.Add(e.ctx, entry("acme", "email", " Bob@Example.COM", suppression.HardBounce)))
	got, ok, err := e.store.Get(e.ctx, "acme", "email", "bob@example.com")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, suppression.Entry{Tenant: "acme", Channel: "email", Recipient: "bob@example.com", Reason: suppression.HardBounce, Code: "5.1.1", TaskID: "t-1", At: day}, got)
	require.Equal(t, "recipient is suppressed: hard bounce 5.1.1 on 2026-11-29", got.Refusal())

	// Another tenant's list does not have it.
	_, ok, err = e.store.Get(e.ctx, "globex", "email", "bob@example.com")
	require.NoError(t, err)
	require.False(t, ok)

	removed, err := e.store.Remove(e.ctx, "acme", "email", "BOB@example.com")
	require.NoError(t, err)
	require.True(t, removed)
	removed, err = e.store.Remove(e.ctx, "acme", "email", "bob@example.com")
	require.NoError(t, err)
	require.False(t, removed)
	p, err := e.store.List(e.ctx, suppression.Filter{Tenant: "acme"})
	require.NoError(t, err)
	require.Empty(t, p.Entries)
}

// A second Add keeps the first entry (its cause and date), unless the
// first stops notices only and the second stops codes too.
func TestAddKeepsOrStrengthens(t *testing.T) {
	tests := []struct {
		name          string
		first, second suppression.Reason
		want          suppression.Reason
	}{
		{"same reason again", suppression.HardBounce, suppression.HardBounce, suppression.HardBounce},
		{"a bounce is not weakened by an unsubscribe", suppression.HardBounce, suppression.Unsubscribe, suppression.HardBounce},
		{"a complaint keeps its date over a bounce", suppression.Complaint, suppression.HardBounce, suppression.Complaint},
		{"a bounce after an unsubscribe stops codes too", suppression.Unsubscribe, suppression.HardBounce, suppression.HardBounce},
		{"a manual entry after an unsubscribe", suppression.Unsubscribe, suppression.Manual, suppression.Manual},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t, suppression.Config{})
			require.NoError(t, e.store.Add(e.ctx, entry("acme", "sms", "+447400123456", tc.first)))
			second := entry("acme", "sms", "+447400123456", tc.second)
			second.At = day.Add(24 * time.Hour)
			require.NoError(t, e.store.Add(e.ctx, second))
			got, ok, err := e.store.Get(e.ctx, "acme", "sms", "+447400123456")
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, tc.want, got.Reason)
			want := day
			if tc.want != tc.first {
				want = second.At
			}
			require.Equal(t, want, got.At)
			p, err := e.store.List(e.ctx, suppression.Filter{Tenant: "acme"})
			require.NoError(t, err)
			require.Len(t, p.Entries, 1)
		})
	}
}

func TestAddRefusesWhatIsNotAnEntry(t *testing.T) {
	e := setup(t, suppression.Config{})
	for _, bad := range []suppression.Entry{
		{Channel: "email", Recipient: "a@example.com", Reason: suppression.Manual},
		{Tenant: "acme", Channel: "wecom", Recipient: "zhangsan", Reason: suppression.Manual},
		{Tenant: "acme", Channel: "email", Recipient: "a@example.com", Reason: "bored"},
		{Tenant: "acme", Channel: "sms", Recipient: "12345", Reason: suppression.OptOut},
		{Tenant: "a{b}", Channel: "email", Recipient: "a@example.com", Reason: suppression.Manual},
	} {
		require.Error(t, e.store.Add(e.ctx, bad), "%+v", bad)
	}
}

// Pages are bounded and go on from their cursor; a tenant's pages hold
// its entries only; the admin's hold every tenant's.
func TestListPagesAndIsolation(t *testing.T) {
	e := setup(t, suppression.Config{PageSize: 3})
	for i := range 7 {
		require.NoError(t, e.store.Add(e.ctx, entry("acme", "email", fmt.Sprintf("u%d@example.com", i), suppression.HardBounce)))
	}
	require.NoError(t, e.store.Add(e.ctx, entry("acme", "sms", "+447400123456", suppression.OptOut)))
	for i := range 2 {
		require.NoError(t, e.store.Add(e.ctx, entry("globex", "email", fmt.Sprintf("g%d@example.com", i), suppression.Complaint)))
	}
	all := func(f suppression.Filter) []string {
		var out []string
		for pages := 0; ; pages++ {
			require.Less(t, pages, 20, "pages never end")
			p, err := e.store.List(e.ctx, f)
			require.NoError(t, err)
			require.LessOrEqual(t, len(p.Entries), 3)
			for _, en := range p.Entries {
				out = append(out, en.Tenant+"/"+en.Channel+":"+en.Recipient)
				if f.Tenant != "" {
					require.Equal(t, f.Tenant, en.Tenant)
				}
			}
			if p.Next == "" {
				return out
			}
			f.Cursor = p.Next
		}
	}
	acme := all(suppression.Filter{Tenant: "acme"})
	require.Len(t, acme, 8)
	require.Equal(t, "acme/email:u0@example.com", acme[0])
	require.Equal(t, "acme/sms:+447400123456", acme[7])
	require.Equal(t, []string{"globex/email:g0@example.com", "globex/email:g1@example.com"}, all(suppression.Filter{Tenant: "globex"}))
	require.Len(t, all(suppression.Filter{}), 10)
	require.Equal(t, []string{"acme/sms:+447400123456"}, all(suppression.Filter{Tenant: "acme", Channel: "sms"}))
	require.Len(t, all(suppression.Filter{Tenant: "acme", Channel: "email"}), 7)
	require.Equal(t, []string{"acme/email:u3@example.com"}, all(suppression.Filter{Tenant: "acme", Recipient: "U3@example.com"}))
	require.Empty(t, all(suppression.Filter{Tenant: "globex", Recipient: "u3@example.com"}))
	require.Equal(t, []string{"globex/email:g1@example.com"}, all(suppression.Filter{Recipient: "g1@example.com"}))

	// One tenant's cursor is not another's.
	p, err := e.store.List(e.ctx, suppression.Filter{Tenant: "acme"})
	require.NoError(t, err)
	_, err = e.store.List(e.ctx, suppression.Filter{Tenant: "globex", Cursor: p.Next})
	require.ErrorIs(t, err, suppression.ErrCursor)
	_, err = e.store.List(e.ctx, suppression.Filter{Tenant: "acme", Cursor: "not a cursor"})
	require.ErrorIs(t, err, suppression.ErrCursor)

	// Removed entries leave the pages.
	for i := range 7 {
		_, err := e.store.Remove(e.ctx, "acme", "email", fmt.Sprintf("u%d@example.com", i))
		require.NoError(t, err)
	}
	require.Equal(t, []string{"acme/sms:+447400123456"}, all(suppression.Filter{Tenant: "acme"}))
}

// An index member whose entry is gone (a Remove that failed half-way) is
// skipped, and a page never reads more than a few times its size.
func TestListSkipsMembersWithoutEntries(t *testing.T) {
	e := setup(t, suppression.Config{PageSize: 2})
	for i := range 30 {
		require.NoError(t, e.store.Add(e.ctx, entry("acme", "email", fmt.Sprintf("u%02d@example.com", i), suppression.HardBounce)))
	}
	// Delete the entries but not the index members, as a failed Remove.
	for i := range 29 {
		require.NoError(t, e.r.Client.Del(e.ctx, e.r.Prefix+fmt.Sprintf("suppression:{acme:email:u%02d@example.com}", i)).Err())
	}
	var got []string
	f := suppression.Filter{Tenant: "acme"}
	for pages := 0; ; pages++ {
		require.Less(t, pages, 30)
		p, err := e.store.List(e.ctx, f)
		require.NoError(t, err)
		for _, en := range p.Entries {
			got = append(got, en.Recipient)
		}
		if p.Next == "" {
			break
		}
		f.Cursor = p.Next
	}
	require.Equal(t, []string{"u29@example.com"}, got)
}
