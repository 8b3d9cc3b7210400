package smslookup_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/receipt/smslookup"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

func setup(t *testing.T) (*smslookup.Store, *testenv.Redis) {
	t.Helper()
	r := testenv.NewRedis(t)
	return smslookup.New(r.Client, r.Prefix), r
}

func TestPutGet(t *testing.T) {
	for _, tc := range []struct {
		name           string
		putVendor      string
		putID          string
		getVendor      string
		getID          string
		want           smslookup.Entry
		found, putFail bool
	}{
		{name: "found", putVendor: "twilio", putID: "SM123", getVendor: "twilio", getID: "SM123",
			want: smslookup.Entry{TaskID: "task-1", Recipient: "+14155550100"}, found: true},
		{name: "another vendor's id", putVendor: "aliyun", putID: "900", getVendor: "tencent", getID: "900"},
		{name: "unknown id", putVendor: "twilio", putID: "SM1", getVendor: "twilio", getID: "SM2"},
		{name: "an id with a brace is not stored", putVendor: "twilio", putID: "SM{1}", getVendor: "twilio", getID: "SM{1}", putFail: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := setup(t)
			ctx := testenv.Context(t, 5*time.Second)
			err := s.Put(ctx, tc.putVendor, tc.putID, smslookup.Entry{TaskID: "task-1", Recipient: "+14155550100"})
			if tc.putFail {
				require.ErrorIs(t, err, smslookup.ErrBadEntry)
			} else {
				require.NoError(t, err)
			}
			got, ok, err := s.Get(ctx, tc.getVendor, tc.getID)
			require.NoError(t, err)
			require.Equal(t, tc.found, ok)
			require.Equal(t, tc.want, got)
		})
	}
}

// Every entry lives TTL (72 h), the vendors' retry windows, and no longer.
func TestEntryHasTTL(t *testing.T) {
	s, r := setup(t)
	ctx := testenv.Context(t, 5*time.Second)
	require.NoError(t, s.Put(ctx, "twilio", "SMttl", smslookup.Entry{TaskID: "t", Recipient: "+14155550100"}))
	ttl, err := r.Client.PTTL(ctx, s.Key("twilio", "SMttl")).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, smslookup.TTL-time.Minute)
	require.LessOrEqual(t, ttl, smslookup.TTL)
	require.Equal(t, 72*time.Hour, smslookup.TTL)
}

// QueuePut rides a composite script (the consumer's burst): the entry is
// written by the round trip that carries the sent mark.
func TestQueuePutRidesAComposite(t *testing.T) {
	s, r := setup(t)
	ctx := testenv.Context(t, 5*time.Second)
	comp := rdb.NewComposer()
	rec := comp.Recorder()
	done := s.QueuePut(ctx, rec, "tencent", "2019:123", smslookup.Entry{TaskID: "task-9", Recipient: "+8613800138000"})
	require.Equal(t, 1, rec.Len())
	require.NoError(t, comp.Exec(ctx, r.Client, rec))
	require.NoError(t, done())
	got, ok, err := s.Get(ctx, "tencent", "2019:123")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, smslookup.Entry{TaskID: "task-9", Recipient: "+8613800138000"}, got)
}
