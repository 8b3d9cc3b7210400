package status_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

type env struct {
	r   *testenv.Redis
	s   *status.Store
	ctx context.Context
}

func setup(t *testing.T) env {
	t.Helper()
	r := testenv.NewRedis(t)
	s, err := status.New(r.Client, status.Config{Prefix: r.Prefix, TTL: time.Hour})
	require.NoError(t, err)
	return env{r: r, s: s, ctx: testenv.Context(t, 60*time.Second)}
}

func (e env) redisNow(t *testing.T) time.Time {
	t.Helper()
	now, err := e.r.Client.Time(e.ctx).Result()
	require.NoError(t, err)
	return now.Truncate(time.Millisecond)
}

func (e env) ttl(t *testing.T, taskID string) time.Duration {
	t.Helper()
	d, err := e.r.Client.PTTL(e.ctx, e.r.Prefix+"status:{"+taskID+"}").Result()
	require.NoError(t, err)
	return d
}

func str(s string) *string { return &s }

func ts(t time.Time) *time.Time { return &t }

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	c := status.Config{Prefix: "p:"}
	require.NoError(t, c.Validate())
	require.Equal(t, 7*24*time.Hour, c.TTL)
	for _, bad := range []status.Config{{}, {Prefix: "p:", TTL: time.Millisecond}, {Prefix: "p:", TTL: -time.Hour}} {
		require.Error(t, bad.Validate(), "%+v", bad)
	}
}

func TestCreateGet(t *testing.T) {
	t.Parallel()
	e := setup(t)
	created := time.Date(2025, 3, 1, 10, 0, 0, 123_456_789, time.UTC)
	full := status.Record{
		TaskID: "t-full", Status: status.Scheduled, Channel: "sms", Recipient: "+86******1234",
		Kind: "notification", Template: "welcome", Attempts: 2,
		CreatedAt: created, UpdatedAt: created.Add(time.Second), ScheduledAt: ts(created.Add(time.Hour)),
		SentAt: ts(created.Add(2 * time.Hour)), LastError: "timeout", ErrorClass: "transient", Reason: "r", Provider: "aliyun",
	}
	require.NoError(t, e.s.Create(e.ctx, full))
	got, err := e.s.Get(e.ctx, "t-full")
	require.NoError(t, err)
	want := full
	want.CreatedAt = created.Truncate(time.Millisecond)
	want.UpdatedAt = want.CreatedAt.Add(time.Second)
	want.ScheduledAt = ts(want.CreatedAt.Add(time.Hour))
	want.SentAt = ts(want.CreatedAt.Add(2 * time.Hour))
	require.Equal(t, want, got)
	require.ErrorIs(t, e.s.Create(e.ctx, full), status.ErrExists)
	ttl := e.ttl(t, "t-full")
	require.Positive(t, ttl)
	require.LessOrEqual(t, ttl, time.Hour)

	// Defaults: queued, timestamps from Redis.
	before := e.redisNow(t)
	require.NoError(t, e.s.Create(e.ctx, status.Record{TaskID: "t-min", Channel: "email"}))
	after := e.redisNow(t)
	got, err = e.s.Get(e.ctx, "t-min")
	require.NoError(t, err)
	require.Equal(t, status.Queued, got.Status)
	require.Equal(t, got.CreatedAt, got.UpdatedAt)
	require.False(t, got.CreatedAt.Before(before) || got.CreatedAt.After(after), got.CreatedAt)
	require.Nil(t, got.SentAt)
	require.Nil(t, got.ScheduledAt)

	_, err = e.s.Get(e.ctx, "t-none")
	require.ErrorIs(t, err, status.ErrNotFound)
}

func TestCreateRejectsInvalid(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tests := []struct {
		name string
		rec  status.Record
	}{
		{"no task id", status.Record{Channel: "email"}},
		{"bad channel", status.Record{TaskID: "t", Channel: "fax"}},
		{"bad status", status.Record{TaskID: "t", Channel: "email", Status: "lost"}},
		{"negative attempts", status.Record{TaskID: "t", Channel: "email", Attempts: -1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Error(t, e.s.Create(e.ctx, tc.rec))
		})
	}
	_, err := e.s.Get(e.ctx, "t")
	require.ErrorIs(t, err, status.ErrNotFound)
}

func TestRecordJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	b, err := json.Marshal(status.Record{
		TaskID: "t", Status: status.Sent, Channel: "email", Recipient: "a***@b.c", Kind: "verification",
		Template: "code", Attempts: 1, CreatedAt: at, UpdatedAt: at, ScheduledAt: &at, SentAt: &at,
		LastError: "e", ErrorClass: "c", Reason: "r", Provider: "p",
	})
	require.NoError(t, err)
	const ts = `"2025-01-02T03:04:05Z"`
	require.JSONEq(t, `{"taskId":"t","status":"sent","channel":"email","recipient":"a***@b.c","kind":"verification",
		"template":"code","attempts":1,"createdAt":`+ts+`,"updatedAt":`+ts+`,"scheduledAt":`+ts+`,"sentAt":`+ts+`,
		"lastError":"e","errorClass":"c","reason":"r","provider":"p"}`, string(b))
}

func TestTransitions(t *testing.T) {
	t.Parallel()
	sentAt := time.Date(2025, 5, 5, 5, 5, 5, 5_000_000, time.UTC)
	tests := []struct {
		name  string
		from  status.Record
		u     status.Update
		final bool // ErrFinal and unchanged
		check func(t *testing.T, r status.Record)
	}{
		{
			name: "queued to sending", from: status.Record{Status: status.Queued},
			u: status.Update{Status: status.Sending, IncAttempts: true},
			check: func(t *testing.T, r status.Record) {
				require.Equal(t, status.Sending, r.Status)
				require.Equal(t, 1, r.Attempts)
			},
		},
		{
			name: "sending to retrying records the error", from: status.Record{Status: status.Sending, Attempts: 1},
			u: status.Update{Status: status.Retrying, LastError: str("smtp 451"), ErrorClass: str("transient"), Provider: str("smtp")},
			check: func(t *testing.T, r status.Record) {
				require.Equal(t, status.Retrying, r.Status)
				require.Equal(t, 1, r.Attempts)
				require.Equal(t, "smtp 451", r.LastError)
				require.Equal(t, "transient", r.ErrorClass)
				require.Equal(t, "smtp", r.Provider)
			},
		},
		{
			name: "retrying to sent clears the error and stamps sentAt", from: status.Record{Status: status.Retrying, LastError: "smtp 451"},
			u: status.Update{Status: status.Sent, LastError: str("")},
			check: func(t *testing.T, r status.Record) {
				require.Equal(t, status.Sent, r.Status)
				require.Empty(t, r.LastError)
				require.NotNil(t, r.SentAt)
				require.Equal(t, r.UpdatedAt, *r.SentAt)
			},
		},
		{
			name: "sending to sent keeps the given sentAt", from: status.Record{Status: status.Sending},
			u: status.Update{Status: status.Sent, SentAt: &sentAt},
			check: func(t *testing.T, r status.Record) {
				require.Equal(t, status.Sent, r.Status)
				require.Equal(t, sentAt.Truncate(time.Millisecond), *r.SentAt)
			},
		},
		{
			name: "retrying to failed", from: status.Record{Status: status.Retrying, Attempts: 5},
			u: status.Update{Status: status.Failed, Reason: str("max attempts"), ErrorClass: str("permanent")},
			check: func(t *testing.T, r status.Record) {
				require.Equal(t, status.Failed, r.Status)
				require.Equal(t, "max attempts", r.Reason)
				require.Equal(t, 5, r.Attempts)
			},
		},
		{
			name: "scheduled to queued", from: status.Record{Status: status.Scheduled},
			u:     status.Update{Status: status.Queued},
			check: func(t *testing.T, r status.Record) { require.Equal(t, status.Queued, r.Status) },
		},
		{
			name: "queued to expired", from: status.Record{Status: status.Queued},
			u:     status.Update{Status: status.Expired, Reason: str("ttl")},
			check: func(t *testing.T, r status.Record) { require.Equal(t, status.Expired, r.Status) },
		},
		{
			name: "attempt without a status change", from: status.Record{Status: status.Sending, Attempts: 2},
			u: status.Update{IncAttempts: true},
			check: func(t *testing.T, r status.Record) {
				require.Equal(t, status.Sending, r.Status)
				require.Equal(t, 3, r.Attempts)
			},
		},
		{name: "sent to retrying", from: status.Record{Status: status.Sent}, u: status.Update{Status: status.Retrying, LastError: str("late")}, final: true},
		{name: "sent to failed", from: status.Record{Status: status.Sent}, u: status.Update{Status: status.Failed}, final: true},
		{name: "sent to sent", from: status.Record{Status: status.Sent}, u: status.Update{Status: status.Sent, Provider: str("other")}, final: true},
		{name: "sent plus an attempt", from: status.Record{Status: status.Sent}, u: status.Update{IncAttempts: true}, final: true},
		// A late update from a delivery that lost its race never hides an
		// outcome (issue 38).
		{name: "failed to retrying", from: status.Record{Status: status.Failed, Reason: "rejected", LastError: "550"},
			u: status.Update{Status: status.Retrying, LastError: str("late 451"), ErrorClass: str("transient")}, final: true},
		{name: "expired to retrying", from: status.Record{Status: status.Expired, Reason: "deadline"},
			u: status.Update{Status: status.Retrying, LastError: str("late 451")}, final: true},
		{name: "failed to sending", from: status.Record{Status: status.Failed, Attempts: 3},
			u: status.Update{Status: status.Sending, IncAttempts: true}, final: true},
		{name: "expired to sending", from: status.Record{Status: status.Expired},
			u: status.Update{Status: status.Sending, IncAttempts: true}, final: true},
		{name: "failed to queued", from: status.Record{Status: status.Failed}, u: status.Update{Status: status.Queued}, final: true},
		{name: "failed plus an attempt", from: status.Record{Status: status.Failed}, u: status.Update{IncAttempts: true}, final: true},
		// Another outcome is the news of a replay from the DLQ.
		{
			name: "failed to sent (replayed)", from: status.Record{Status: status.Failed, LastError: "550"},
			u: status.Update{Status: status.Sent, LastError: str("")},
			check: func(t *testing.T, r status.Record) {
				require.Equal(t, status.Sent, r.Status)
				require.Empty(t, r.LastError)
			},
		},
		{
			name: "expired to failed (replayed)", from: status.Record{Status: status.Expired},
			u:     status.Update{Status: status.Failed, Reason: str("rejected")},
			check: func(t *testing.T, r status.Record) { require.Equal(t, status.Failed, r.Status) },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			from := tc.from
			from.TaskID, from.Channel = "t", "email"
			from.CreatedAt = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
			from.UpdatedAt = from.CreatedAt
			require.NoError(t, e.s.Create(e.ctx, from))
			before, err := e.s.Get(e.ctx, "t")
			require.NoError(t, err)
			// Stand in for time passing, to see the TTL refreshed.
			require.NoError(t, e.r.Client.PExpire(e.ctx, e.r.Prefix+"status:{t}", time.Minute).Err())

			got, err := e.s.Update(e.ctx, "t", tc.u)
			stored, gerr := e.s.Get(e.ctx, "t")
			require.NoError(t, gerr)
			if tc.final {
				require.ErrorIs(t, err, status.ErrFinal)
				require.Equal(t, before, got)
				require.Equal(t, before, stored)
				require.LessOrEqual(t, e.ttl(t, "t"), time.Minute)
				return
			}
			require.NoError(t, err)
			require.Equal(t, stored, got)
			require.Equal(t, from.CreatedAt, got.CreatedAt)
			require.True(t, got.UpdatedAt.After(from.UpdatedAt), "updatedAt stamped")
			require.Greater(t, e.ttl(t, "t"), time.Minute, "TTL refreshed")
			tc.check(t, got)
		})
	}
}

func TestUpdateCreatesMissingRecord(t *testing.T) {
	t.Parallel()
	e := setup(t)
	before := e.redisNow(t)
	got, err := e.s.Update(e.ctx, "orphan", status.Update{Status: status.Retrying, IncAttempts: true, LastError: str("x")})
	after := e.redisNow(t)
	require.NoError(t, err)
	require.Equal(t, "orphan", got.TaskID)
	require.Equal(t, status.Retrying, got.Status)
	require.Equal(t, 1, got.Attempts)
	require.Equal(t, "x", got.LastError)
	require.Equal(t, got.CreatedAt, got.UpdatedAt)
	require.False(t, got.UpdatedAt.Before(before) || got.UpdatedAt.After(after), got.UpdatedAt)
	ttl := e.ttl(t, "orphan")
	require.Greater(t, ttl, 59*time.Minute)
	require.LessOrEqual(t, ttl, time.Hour)
	stored, err := e.s.Get(e.ctx, "orphan")
	require.NoError(t, err)
	require.Equal(t, got, stored)
}

func TestUpdateRejectsInvalid(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_, err := e.s.Update(e.ctx, "t", status.Update{Status: "lost"})
	require.Error(t, err)
	_, err = e.s.Update(e.ctx, "", status.Update{Status: status.Sending})
	require.Error(t, err)
	_, err = e.s.Get(e.ctx, "t")
	require.ErrorIs(t, err, status.ErrNotFound)
}

func TestConcurrentAttemptsCountExactly(t *testing.T) {
	t.Parallel()
	const n = 50
	e := setup(t)
	require.NoError(t, e.s.Create(e.ctx, status.Record{TaskID: "t", Channel: "sms"}))
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			st := status.Sending
			if i%2 == 1 {
				st = status.Retrying
			}
			_, errs[i] = e.s.Update(e.ctx, "t", status.Update{Status: st, IncAttempts: true})
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	got, err := e.s.Get(e.ctx, "t")
	require.NoError(t, err)
	require.Equal(t, n, got.Attempts)
}

func TestDelete(t *testing.T) {
	t.Parallel()
	e := setup(t)
	require.NoError(t, e.s.Create(e.ctx, status.Record{TaskID: "t", Channel: "email"}))
	require.NoError(t, e.s.Delete(e.ctx, "t"))
	_, err := e.s.Get(e.ctx, "t")
	require.ErrorIs(t, err, status.ErrNotFound)
	require.ErrorIs(t, e.s.Delete(e.ctx, "t"), status.ErrNotFound)
}

// A guarded update applies only while the guard key holds the value: the
// consumer pipelines its "sending" update behind its claim, and a claim
// another consumer holds must leave the record alone.
func TestGuardedUpdate(t *testing.T) {
	e := setup(t)
	require.NoError(t, e.s.Create(e.ctx, status.Record{TaskID: "g1", Channel: "email", Recipient: "a***@example.com", Kind: "notification", Template: "notice"}))
	guardKey := e.r.Prefix + "lease-of-{g1}" // the task's hash tag, as claim keys have
	for _, tc := range []struct {
		name    string
		holds   string // what the guard key holds; "" = missing
		applies bool
	}{
		{"guard key missing", "", false},
		{"another value", "lease:other", false},
		{"our value", "lease:ours", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.holds == "" {
				require.NoError(t, e.r.Client.Del(e.ctx, guardKey).Err())
			} else {
				require.NoError(t, e.r.Client.Set(e.ctx, guardKey, tc.holds, time.Minute).Err())
			}
			before, err := e.s.Get(e.ctx, "g1")
			require.NoError(t, err)
			var rec status.Record
			err = rdb.Pipelined(e.ctx, e.r.Client, func(p redis.Pipeliner) (func() error, error) {
				done, err := e.s.QueueUpdate(e.ctx, p, "g1", status.Update{Status: status.Sending, IncAttempts: true, Guard: &status.Guard{Key: guardKey, Value: "lease:ours"}})
				if err != nil {
					return nil, err
				}
				return func() (err error) { rec, err = done(); return err }, nil
			}, e.s.LoadScripts)
			after, gerr := e.s.Get(e.ctx, "g1")
			require.NoError(t, gerr)
			if !tc.applies {
				require.ErrorIs(t, err, status.ErrGuard)
				require.Equal(t, before, after, "a failed guard changes nothing")
				return
			}
			require.NoError(t, err)
			require.Equal(t, status.Sending, rec.Status)
			require.Equal(t, before.Attempts+1, after.Attempts)
		})
	}
}

// InsertCommands store the same record Create does, with plain commands.
func TestInsertCommandsStoreTheRecord(t *testing.T) {
	e := setup(t)
	now := time.Now().Truncate(time.Millisecond)
	rec := status.Record{TaskID: "ins1", Channel: "email", Recipient: "a***@example.com", Kind: "verification", Template: "verify_code", CreatedAt: now, UpdatedAt: now}
	cmds, err := e.s.InsertCommands(rec)
	require.NoError(t, err)
	p := e.r.Client.TxPipeline()
	for _, c := range cmds {
		c.Do(e.ctx, p)
	}
	_, err = p.Exec(e.ctx)
	require.NoError(t, err)
	got, err := e.s.Get(e.ctx, "ins1")
	require.NoError(t, err)
	require.Equal(t, status.Queued, got.Status)
	require.Equal(t, "a***@example.com", got.Recipient)
	require.True(t, got.CreatedAt.Equal(now))
	require.Greater(t, e.ttl(t, "ins1"), 50*time.Minute)

	_, err = e.s.InsertCommands(status.Record{TaskID: "ins2", Channel: "email", Recipient: "x", Kind: "verification", Template: "t"})
	require.Error(t, err, "times are required")
}

func TestBatchCountsItsTasksByStatus(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ids := []string{"b-1", "b-2", "b-3", "b-4"}
	for i, id := range ids[:3] {
		require.NoError(t, e.s.Create(e.ctx, status.Record{TaskID: id, Channel: "wecom", Tenant: "shop", Status: []status.State{status.Queued, status.Sent, status.Sent}[i]}))
	}
	// b-4's record is gone (expired): it counts as expired.
	require.NoError(t, e.s.CreateBatch(e.ctx, "batch-1", ids))
	b, err := e.s.GetBatch(e.ctx, "batch-1")
	require.NoError(t, err)
	require.Equal(t, ids, b.TaskIDs)
	require.Equal(t, map[status.State]int{status.Queued: 1, status.Sent: 2, status.Expired: 1}, b.Counts)
	require.Equal(t, "shop", b.Tenant, "owned by its first task's tenant")
	require.False(t, b.Ownerless)
	require.NoError(t, e.s.CreateBatch(e.ctx, "batch-3", []string{"b-4", "b-1"}))
	b3, err := e.s.GetBatch(e.ctx, "batch-3")
	require.NoError(t, err)
	require.True(t, b3.Ownerless, "its first task's record is gone")
	ttl, err := e.r.Client.PTTL(e.ctx, e.r.Prefix+"batch:batch-1").Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 59*time.Minute, "kept as long as the records")

	require.NoError(t, e.s.DeleteBatch(e.ctx, "batch-1"))
	_, err = e.s.GetBatch(e.ctx, "batch-1")
	require.ErrorIs(t, err, status.ErrNotFound)
	require.Error(t, e.s.CreateBatch(e.ctx, "batch-2", nil))
}

// CreateBatch writes the records it is given with the task list, in one
// round trip, each as InsertCommands would: every field, the TTL, and a
// batch of 1,000 split into bounded scripts changes nothing of that.
func TestCreateBatchWritesItsRecords(t *testing.T) {
	t.Parallel()
	e := setup(t)
	now := time.Now().Truncate(time.Millisecond)
	for _, n := range []int{1, 3, 1000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			ids := make([]string, n)
			recs := make([]status.Record, n)
			for i := range ids {
				ids[i] = fmt.Sprintf("cb%d-%d", n, i)
				recs[i] = status.Record{TaskID: ids[i], Channel: "wecom", Recipient: fmt.Sprintf("u%d", i), Kind: "notification",
					Template: "notice", Tenant: "shop", Priority: "normal", CreatedAt: now, UpdatedAt: now}
			}
			batch := fmt.Sprintf("batch-with-records-%d", n)
			require.NoError(t, e.s.CreateBatch(e.ctx, batch, ids, recs...))
			b, err := e.s.GetBatch(e.ctx, batch)
			require.NoError(t, err)
			require.Equal(t, ids, b.TaskIDs)
			require.Equal(t, map[status.State]int{status.Queued: n}, b.Counts)
			for _, i := range []int{0, n / 2, n - 1} {
				got, err := e.s.Get(e.ctx, ids[i])
				require.NoError(t, err)
				require.Equal(t, recs[i].Recipient, got.Recipient)
				require.Equal(t, status.Queued, got.Status)
				require.Equal(t, "shop", got.Tenant)
				require.True(t, got.CreatedAt.Equal(now))
				require.Greater(t, e.ttl(t, ids[i]), 50*time.Minute)
			}
		})
	}
	_, err := e.s.GetBatch(e.ctx, "never")
	require.ErrorIs(t, err, status.ErrNotFound)
	bad := status.Record{TaskID: "cb-bad", Channel: "wecom"} // no times
	require.Error(t, e.s.CreateBatch(e.ctx, "batch-bad", []string{"cb-bad"}, bad))
	_, err = e.s.GetBatch(e.ctx, "batch-bad")
	require.ErrorIs(t, err, status.ErrNotFound, "nothing written for a bad record")
}

// lastError is read by the message's tenant: whatever error it is made
// of, the record holds no secret (issue 37: an upload's url.Error quoted
// the WeCom access token), and neither does what a read returns of a
// record written before.
func TestLastErrorNeverHoldsASecret(t *testing.T) {
	t.Parallel()
	e := setup(t)
	leak := `wecom: transient failure upload: Post "http://h/cgi-bin/media/upload?access_token=tok-0123456789abcdefgh&type=image": context deadline exceeded`
	require.NoError(t, e.s.Create(e.ctx, status.Record{TaskID: "created", Channel: "wecom", LastError: leak}))
	require.NoError(t, e.s.Create(e.ctx, status.Record{TaskID: "updated", Channel: "wecom"}))
	rec, err := e.s.Update(e.ctx, "updated", status.Update{Status: status.Retrying, LastError: str(leak)})
	require.NoError(t, err)
	require.NotContains(t, rec.LastError, "tok-0123456789abcdefgh")
	require.Contains(t, rec.LastError, "context deadline exceeded", "the rest of the error stays")
	// A record from before the scrub, written straight into Redis.
	require.NoError(t, e.s.Create(e.ctx, status.Record{TaskID: "old", Channel: "wecom"}))
	require.NoError(t, e.r.Client.HSet(e.ctx, e.r.Prefix+"status:{old}", "lastError", leak).Err())
	for _, id := range []string{"created", "updated"} {
		raw, err := e.r.Client.HGet(e.ctx, e.r.Prefix+"status:{"+id+"}", "lastError").Result()
		require.NoError(t, err)
		require.NotContains(t, raw, "tok-0123456789abcdefgh", "stored scrubbed: %s", id)
	}
	for _, id := range []string{"created", "updated", "old"} {
		rec, err := e.s.Get(e.ctx, id)
		require.NoError(t, err)
		require.NotContains(t, rec.LastError, "tok-0123456789abcdefgh", id)
		require.Contains(t, rec.LastError, "http://h/cgi-bin/[redacted]", id) // scheme, host, first path segment
	}
}
