package dlq

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"

	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/logging"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Listing, stats and show read every kind of dead letter correctly and
// leave the DLQ exactly as it was.
func TestReadOnlyCommands(t *testing.T) {
	t.Parallel()
	e := setup(t, seedModel)
	sd := seed(t, e)
	dlq := e.mail.DeadLetterQueue

	t.Run("list reports refined and broker reasons", func(t *testing.T) {
		r := e.run(t, "list", "--channel", "mail", "--json")
		require.Equal(t, ExitOK, r.code, r.stderr)
		got := entries(t, r.stdout)
		require.Len(t, got, 8)
		want := map[string][2]string{sd.malformed: {status.ReasonMalformed, BrokerRejected}}
		for _, id := range sd.permanent {
			want[id] = [2]string{status.ReasonPermanent, BrokerRejected}
		}
		for _, id := range sd.maxlen {
			want[id] = [2]string{BrokerMaxLen, BrokerMaxLen}
		}
		for _, id := range sd.expired {
			want[id] = [2]string{BrokerExpired, BrokerExpired}
		}
		for id, w := range want {
			g, ok := got[id]
			require.True(t, ok, "missing %s", id)
			require.Equal(t, w, [2]string{g.Reason, g.BrokerReason}, id)
			require.Equal(t, e.mail.Queue, g.DeathQueue, id)
			require.NotNil(t, g.DeathTime, id)
			require.EqualValues(t, 1, g.Deaths, id)
			require.Equal(t, topology.Mail, g.Channel, id)
		}
		for _, id := range sd.permanent {
			g := got[id]
			require.Equal(t, logging.Mask(sd.rcpt[id]), g.Recipient)
			require.Equal(t, "permanent", g.ErrorClass)
			require.Contains(t, g.LastError, "550")
			require.NotNil(t, g.Attempts)
			require.Equal(t, 1, *g.Attempts)
		}
		require.NotEmpty(t, got[sd.malformed].Malformed)
	})

	t.Run("list filters", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want []string
		}{
			{[]string{"--reason", "rejected"}, sorted(sd.permanent, []string{sd.malformed})},
			{[]string{"--reason", "permanent"}, sorted(sd.permanent)},
			{[]string{"--reason", "malformed"}, []string{sd.malformed}},
			{[]string{"--reason", "maxlen"}, sorted(sd.maxlen)},
			{[]string{"--reason", "expired"}, sorted(sd.expired)},
			{[]string{"--reason", "retries_exhausted"}, nil},
			{[]string{"--since", "1h"}, sd.all()},
			{[]string{"--limit", "2"}, nil}, // any two
		} {
			r := e.run(t, append([]string{"list", "--channel", "mail", "--json"}, tc.args...)...)
			require.Equal(t, ExitOK, r.code, r.stderr)
			var ids []string
			for id := range entries(t, r.stdout) {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			if tc.args[0] == "--limit" {
				require.Len(t, ids, 2)
				continue
			}
			require.Equal(t, tc.want, ids, "%v", tc.args)
		}
	})

	t.Run("list as a table masks recipients", func(t *testing.T) {
		r := e.run(t, "list", "--channel", "mail")
		require.Equal(t, ExitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, "BROKER REASON")
		require.Contains(t, r.stdout, "8 shown of 8 in "+dlq)
		for _, id := range sd.all() {
			require.Contains(t, r.stdout, id)
		}
		for id, rcpt := range sd.rcpt {
			require.NotContains(t, r.stdout, rcpt, id)
			require.Contains(t, r.stdout, logging.Mask(rcpt))
		}
	})

	t.Run("stats library", func(t *testing.T) {
		st, err := Stats(testenv.Context(t, 30*time.Second), e.Conn, e.Model, e.Status)
		require.NoError(t, err)
		require.Len(t, st, len(DeadLetterQueues(e.Model)))
		byQueue := map[string]QueueStats{}
		for _, q := range st {
			byQueue[q.Queue] = q
		}
		m := byQueue[dlq]
		require.Equal(t, topology.Mail, m.Channel)
		require.Equal(t, 8, m.Total)
		require.Equal(t, map[string]int{"permanent": 2, "malformed": 1, "maxlen": 3, "expired": 2}, m.ByReason)
		require.NotNil(t, m.Oldest)
		require.NotNil(t, m.Newest)
		require.False(t, m.Newest.Before(*m.Oldest))
		sms := byQueue[smsDLQ(t, e)]
		require.Equal(t, topology.SMS, sms.Channel)
		require.Zero(t, sms.Total)
		require.Nil(t, sms.Oldest)
		relay := byQueue[e.Model.Delay.RelayDeadLetterQ]
		require.Empty(t, relay.Channel)
		b, err := json.Marshal(m)
		require.NoError(t, err)
		require.Contains(t, string(b), `"byReason":{`)
	})

	t.Run("stats command", func(t *testing.T) {
		r := e.run(t, "stats", "--json")
		require.Equal(t, ExitOK, r.code, r.stderr)
		var doc struct{ Queues []StatsReport }
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
		require.Len(t, doc.Queues, len(DeadLetterQueues(e.Model)), "every DLQ of the model")
		require.Equal(t, dlq, doc.Queues[0].Queue)
		require.Equal(t, map[string]int{"rejected": 3, "maxlen": 3, "expired": 2}, doc.Queues[0].ByBrokerReason)
		require.Equal(t, map[string]int{"permanent": 2, "malformed": 1, "maxlen": 3, "expired": 2}, doc.Queues[0].ByReason)

		r = e.run(t, "stats", "--channel", "mail")
		require.Equal(t, ExitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, "maxlen=3 expired=2 permanent=2 malformed=1")
		require.Contains(t, r.stdout, "rejected=3")
		require.NotContains(t, r.stdout, smsDLQ(t, e))
	})

	t.Run("stats caps what it reads", func(t *testing.T) {
		r := e.run(t, "stats", "--channel", "mail", "--limit", "5", "--json")
		require.Equal(t, ExitOK, r.code, r.stderr)
		var doc struct{ Queues []StatsReport }
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
		require.Equal(t, 8, doc.Queues[0].Total)
		require.Equal(t, 5, doc.Queues[0].Scanned)
		require.Equal(t, 3, doc.Queues[0].ByReason[ReasonNotScanned])
	})

	t.Run("show masks the code", func(t *testing.T) {
		id := sd.permanent[0]
		sealed := sealedCode(t, e, id)
		r := e.run(t, "show", "--channel", "mail", id)
		require.Equal(t, ExitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, SealedMask)
		require.NotContains(t, r.stdout, sealed)
		require.NotContains(t, r.stdout, "code: ")
		require.Contains(t, r.stdout, "rejected in "+e.mail.Queue)
		require.Contains(t, r.stdout, "permanent (broker: rejected)")

		r = e.run(t, "show", "--channel", "mail", "--json", id)
		require.Equal(t, ExitOK, r.code, r.stderr)
		var s Shown
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &s))
		require.Empty(t, s.Code)
		require.Equal(t, SealedMask, s.Body.(map[string]any)["sealedCode"])
		require.Equal(t, id, s.Properties.MessageID)
		require.Len(t, s.Deaths, 1)
		require.Equal(t, BrokerRejected, s.Deaths[0].Reason)
		require.Empty(t, e.logs.FilterMessage("verification code revealed").All())
	})

	t.Run("show --reveal opens the code and logs who did", func(t *testing.T) {
		id := sd.permanent[1]
		code := sd.codes[id]
		r := e.run(t, "show", "--channel", "mail", "--reveal", id)
		require.Equal(t, ExitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, "code: "+code+" ")

		r = e.run(t, "show", "--channel", "mail", "--reveal", "--json", id)
		require.Equal(t, ExitOK, r.code, r.stderr)
		var s Shown
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &s))
		require.Equal(t, code, s.Code)

		logged := e.logs.FilterMessage("verification code revealed").All()
		require.Len(t, logged, 2)
		require.Equal(t, zapcore.WarnLevel, logged[0].Level)
		f := logged[0].ContextMap()
		require.Equal(t, id, f["task_id"])
		require.NotEmpty(t, f["os_user"])
		for _, l := range e.logs.All() {
			for k, v := range l.ContextMap() {
				require.NotContains(t, toString(v), code, "log field %s carries the code", k)
			}
		}
	})

	t.Run("show --reveal with the wrong secret fails", func(t *testing.T) {
		e2 := *e
		e2.cfg.CodeSecret = strings.Repeat("x", 40)
		r := e2.run(t, "show", "--channel", "mail", "--reveal", sd.permanent[0])
		require.Equal(t, ExitError, r.code)
		require.Contains(t, r.stderr, "cannot open sealed code")
		require.NotContains(t, r.stdout, "code: ")
	})

	t.Run("show an unknown id", func(t *testing.T) {
		r := e.run(t, "show", "--channel", "mail", "nope")
		require.Equal(t, ExitError, r.code)
		require.Contains(t, r.stderr, "no message with id nope in "+dlq)
	})

	t.Run("without Redis the broker's reasons are shown", func(t *testing.T) {
		e2 := *e
		e2.cfg.RedisURL = "redis://127.0.0.1:1/0"
		e2.cfg.StatusTimeout = 200 * time.Millisecond
		r := e2.run(t, "list", "--channel", "mail", "--json")
		require.Equal(t, ExitOK, r.code, r.stderr)
		require.Contains(t, r.stderr, "status records unavailable")
		got := entries(t, r.stdout)
		require.Len(t, got, 8)
		require.Equal(t, BrokerRejected, got[sd.permanent[0]].Reason)
		require.Equal(t, status.ReasonMalformed, got[sd.malformed].Reason, "malformed is read from the body")
	})

	// Everything above only read.
	require.Equal(t, sd.all(), idsIn(t, e.Stack, dlq))
	for _, d := range peek(t, e.Stack, dlq) {
		require.True(t, d.Redelivered, "a message given back is flagged redelivered")
	}
	require.Zero(t, e.Depth(e.mail.Queue))
}

func toString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func sealedCode(t *testing.T, e *env, id string) string {
	t.Helper()
	for _, d := range peek(t, e.Stack, e.mail.DeadLetterQueue) {
		if d.MessageId == id {
			m, err := envelope.Decode(d.Body)
			require.NoError(t, err)
			require.NotEmpty(t, m.SealedCode)
			return m.SealedCode
		}
	}
	t.Fatalf("%s not in the DLQ", id)
	return ""
}

// Every kind of dead letter goes back and is mailed once; the malformed
// one stays; --dry-run changes nothing.
func TestReplayEveryKind(t *testing.T) {
	t.Parallel()
	e := setup(t, seedModel)
	sd := seed(t, e)
	dlq := e.mail.DeadLetterQueue

	r := e.run(t, "replay", "--channel", "mail", "--all", "--dry-run", "--json")
	require.Equal(t, ExitOK, r.code, r.stderr)
	var rep ReplayReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.True(t, rep.DryRun)
	require.Equal(t, 7, rep.WouldReplay)
	require.Equal(t, 1, rep.Skipped)
	require.Zero(t, rep.Replayed)
	require.Equal(t, sd.all(), idsIn(t, e.Stack, dlq))
	require.Zero(t, e.Depth(e.mail.Queue))

	e.Mail.Reset()
	e.StartConsumer("after-fix", 4)
	// Paced: the main queue holds two messages in this test's topology.
	r = e.run(t, "replay", "--channel", "mail", "--all", "--rate", "50/s", "--json")
	require.Equal(t, ExitOK, r.code, r.stderr)
	rep = ReplayReport{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Equal(t, 7, rep.Replayed)
	require.Equal(t, 1, rep.Skipped)
	require.Zero(t, rep.Failed)
	require.Zero(t, rep.SkippedDeadline)
	for _, m := range rep.Messages {
		if m.ID == sd.malformed {
			require.Equal(t, Skipped, m.Result)
			require.Contains(t, m.Why, "malformed")
		} else {
			require.Equal(t, Replayed, m.Result, m.ID)
		}
	}
	testenv.WaitFor(t, 20*time.Second, "every replayed message mailed", func() bool { return e.Mail.Count() == 7 })
	for id, rcpt := range sd.rcpt {
		require.Equal(t, 1, e.MailsTo(rcpt), id)
		// The consumer records "sent" just after SMTP accepted the mail.
		testenv.WaitFor(t, 10*time.Second, "status sent: "+id, func() bool { return e.StatusOf(id).Status == status.Sent })
	}
	require.Equal(t, []string{sd.malformed}, idsIn(t, e.Stack, dlq))
}

// A replay interrupted halfway loses nothing: each message was either
// mailed or is still in the DLQ; finishing the replay mails the rest once.
func TestReplayInterrupted(t *testing.T) {
	t.Parallel()
	errCrash := errors.New("killed between the confirm and the ack")
	for _, tc := range []struct {
		name    string
		crash   bool
		inDLQ   int // after the interruption
		replays int
	}{
		{name: "SIGINT after the third confirm", inDLQ: 3, replays: 3},
		{name: "crash between the third confirm and its ack", crash: true, inDLQ: 4, replays: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, nil)
			ids, rcpt, _ := rejected(t, e, 6)
			dlq := e.mail.DeadLetterQueue
			ctx, cancel := context.WithCancel(testenv.Context(t, 30*time.Second))
			defer cancel()
			r := e.runCLI(ctx, func(c *cli) {
				c.afterConfirm = func(n int) error {
					if n < 3 {
						return nil
					}
					if tc.crash {
						return errCrash
					}
					cancel()
					return nil
				}
			}, "replay", "--channel", "mail", "--all", "--json")
			require.Equal(t, ExitError, r.code, r.stderr)
			var rep ReplayReport
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
			require.Equal(t, tc.replays, rep.Replayed)
			require.Equal(t, tc.inDLQ, e.Depth(dlq))

			// 3 copies were confirmed either way; they are mailed.
			testenv.WaitFor(t, 15*time.Second, "the three confirmed copies mailed", func() bool { return e.Mail.Count() == 3 })
			left := idsIn(t, e.Stack, dlq)
			both := 0
			for _, id := range ids {
				mailed := e.MailsTo(rcpt[id]) == 1
				inDLQ := slices.Contains(left, id)
				require.True(t, mailed || inDLQ, "%s was lost", id)
				if mailed && inDLQ {
					both++
				}
			}
			require.Equal(t, tc.inDLQ+3-len(ids), both, "duplicates: only the message caught between confirm and ack")

			r = e.run(t, "replay", "--channel", "mail", "--all")
			require.Equal(t, ExitOK, r.code, r.stderr)
			require.Contains(t, r.stdout, fmt.Sprintf("replayed %d,", tc.inDLQ))
			testenv.WaitFor(t, 15*time.Second, "the rest mailed", func() bool { return e.Mail.Count() == len(ids) })
			testenv.WaitFor(t, 15*time.Second, "main queue drained", func() bool { return e.Depth(e.mail.Queue) == 0 })
			for _, id := range ids {
				require.Equal(t, 1, e.MailsTo(rcpt[id]), "mailed once: %s", id)
			}
			require.Zero(t, e.Depth(dlq))
		})
	}
}

// --rate paces the republishes, and a replayed message is the original
// with its death history stripped and its replays counted.
func TestReplayRateAndShape(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ids, _, c := rejected(t, e, 5)
	c.Stop() // the copies stay in the main queue to be looked at
	dlq := e.mail.DeadLetterQueue
	before := map[string][]byte{}
	for _, d := range peek(t, e.Stack, dlq) {
		require.NotNil(t, d.Headers[envelope.HeaderXDeath])
		before[d.MessageId] = d.Body
	}

	start := time.Now()
	r := e.run(t, "replay", "--channel", "mail", "--all", "--rate", "10/s")
	elapsed := time.Since(start)
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "replayed 5, skipped 0 (0 past their deadline), failed 0")
	require.GreaterOrEqual(t, elapsed, 400*time.Millisecond, "5 messages at 10/s take at least 4 intervals")
	require.Zero(t, e.Depth(dlq))

	copies := peek(t, e.Stack, e.mail.Queue)
	require.Len(t, copies, 5)
	var got []string
	for _, d := range copies {
		got = append(got, d.MessageId)
		require.Equal(t, before[d.MessageId], d.Body, "body unchanged")
		require.Equal(t, envelope.ContentType, d.ContentType)
		require.EqualValues(t, 2, d.DeliveryMode)
		require.Equal(t, "notification", d.Type)
		n, ok := envelope.HeaderInt(d.Headers, envelope.HeaderReplays)
		require.True(t, ok)
		require.EqualValues(t, 1, n)
		for k := range d.Headers {
			require.False(t, k == envelope.HeaderXDeath || strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-"), "header %s kept", k)
		}
		require.NotNil(t, d.Headers[envelope.HeaderSchema])
	}
	slices.Sort(got)
	require.Equal(t, ids, got)
}

// Past-deadline messages are skipped unless --force; forced, the consumer
// dead-letters them again as deadline, with the replay counted.
func TestReplayDeadline(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	dlq := e.mail.DeadLetterQueue
	e.Mail.FailAlways(550, "5.1.1 no such user")
	e.StartConsumer("c", 2)
	notice := e.Notice(topology.Mail, "n-"+testenv.ID()+"@example.com", "t", nil)
	lateRcpt := "late-" + testenv.ID() + "@example.com"
	late, _ := e.Verification(lateRcpt, "login", func(m *envelope.Message) {
		past := time.Now().Add(-time.Minute)
		m.Deadline = &past
	})
	testenv.WaitFor(t, 10*time.Second, "both dead-lettered", func() bool { return e.Depth(dlq) == 2 })
	e.Mail.Reset()

	r := e.run(t, "list", "--channel", "mail", "--reason", "deadline", "--json")
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Contains(t, entries(t, r.stdout), late)

	r = e.run(t, "replay", "--channel", "mail", "--all", "--json")
	require.Equal(t, ExitOK, r.code, r.stderr)
	var rep ReplayReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Equal(t, 1, rep.Replayed)
	require.Equal(t, 1, rep.Skipped)
	require.Equal(t, 1, rep.SkippedDeadline)
	require.Equal(t, []string{late}, idsIn(t, e.Stack, dlq))
	testenv.WaitFor(t, 10*time.Second, "the notice mailed", func() bool { return e.Mail.Count() == 1 })

	r = e.run(t, "replay", "--channel", "mail", "--id", late, "--force")
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "replayed 1, skipped 0")
	// Back in the DLQ, rejected again by the consumer, replay counted.
	testenv.WaitFor(t, 10*time.Second, "dead-lettered again after its replay", func() bool {
		for _, d := range peek(t, e.Stack, dlq) {
			if n, _ := envelope.HeaderInt(d.Headers, envelope.HeaderReplays); d.MessageId == late && n == 1 {
				return true
			}
		}
		return false
	})
	require.Zero(t, e.MailsTo(lateRcpt))
	require.NotEqual(t, notice, late)
}

// A message the relay cannot route lands in the relay's DLQ; replay finds
// its channel in the body.
func TestReplayRelayDeadLetter(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	relayDLQ := e.Model.Delay.RelayDeadLetterQ
	require.NotEmpty(t, relayDLQ)
	rcpt := "relay-" + testenv.ID() + "@example.com"
	id := testenv.ID() + testenv.ID()
	m := &envelope.Message{Version: envelope.SchemaVersion, TaskID: id, Kind: envelope.Notification, Channel: topology.Mail,
		Recipient: rcpt, Template: "notice", Variables: map[string]string{"title": "t", "content": "c"}, CreatedAt: time.Now()}
	pub, err := envelope.Publishing(m)
	require.NoError(t, err)
	// No x-due-at or target: the relay dead-letters it.
	require.NoError(t, e.Pub.Publish(testenv.Context(t, 10*time.Second), e.Model.Delay.RouteExchange, e.Model.Delay.RelayKey, pub))
	e.StartConsumer("c", 2)
	testenv.WaitFor(t, 10*time.Second, "in the relay DLQ", func() bool { return e.Depth(relayDLQ) == 1 })

	r := e.run(t, "list", "--queue", relayDLQ, "--json")
	require.Equal(t, ExitOK, r.code, r.stderr)
	got := entries(t, r.stdout)[id]
	require.Equal(t, BrokerRejected, got.Reason)
	require.Equal(t, e.Model.Delay.RelayQueue, got.DeathQueue)
	require.Equal(t, topology.Mail, got.Channel)

	r = e.run(t, "replay", "--queue", relayDLQ, "--id", id)
	require.Equal(t, ExitOK, r.code, r.stderr)
	testenv.WaitFor(t, 10*time.Second, "mailed", func() bool { return e.MailsTo(rcpt) == 1 })
	require.Zero(t, e.Depth(relayDLQ))
}

// purge refuses without --yes, exports exactly what it deletes, and
// deletes nothing when the export fails.
func TestPurge(t *testing.T) {
	t.Parallel()
	e := setup(t, seedModel)
	sd := seed(t, e)
	dlq := e.mail.DeadLetterQueue
	dir := t.TempDir()

	r := e.run(t, "purge", "--channel", "mail", "--reason", "maxlen")
	require.Equal(t, ExitUsage, r.code)
	require.Contains(t, r.stderr, "would delete 3 message(s) from "+dlq)
	require.Equal(t, sd.all(), idsIn(t, e.Stack, dlq))

	file := filepath.Join(dir, "failing.jsonl")
	r = e.runCLI(testenv.Context(t, 30*time.Second), func(c *cli) {
		c.wrapExport = func(w io.Writer) io.Writer { return &failAfter{w: w, n: 1} }
	}, "purge", "--channel", "mail", "--all", "--yes", "--export", file)
	require.Equal(t, ExitError, r.code)
	require.Contains(t, r.stderr, "nothing was deleted")
	require.NoFileExists(t, file)
	require.Equal(t, sd.all(), idsIn(t, e.Stack, dlq))

	file = filepath.Join(dir, "maxlen.jsonl")
	r = e.run(t, "purge", "--channel", "mail", "--reason", "maxlen", "--yes", "--export", file, "--json")
	require.Equal(t, ExitOK, r.code, r.stderr)
	var rep PurgeReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Equal(t, 3, rep.Deleted)
	exported := exportIDs(t, file)
	require.Equal(t, sorted(sd.maxlen), exported)
	left := idsIn(t, e.Stack, dlq)
	require.Equal(t, sorted(sd.permanent, []string{sd.malformed}, sd.expired), left)
	require.Equal(t, sd.all(), sorted(exported, left), "what left the queue is what the file holds")
	info, err := os.Stat(file)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())

	r = e.run(t, "purge", "--channel", "mail", "--all", "--yes", "--export", file)
	require.Equal(t, ExitError, r.code)
	require.Contains(t, r.stderr, "already exists")
	require.Equal(t, left, idsIn(t, e.Stack, dlq))
	require.Equal(t, sorted(sd.maxlen), exportIDs(t, file), "the old export is untouched")

	r = e.run(t, "purge", "--channel", "mail", "--id", sd.malformed, "--yes")
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "deleted 1 message(s) from "+dlq)
	require.Equal(t, sorted(sd.permanent, sd.expired), idsIn(t, e.Stack, dlq))
}

type failAfter struct {
	w io.Writer
	n int
}

func (f *failAfter) Write(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("disk full")
	}
	f.n--
	return f.w.Write(p)
}

// exportIDs reads an export file and checks each line can restore its
// message: the body in base64, and decoded when it is JSON.
func exportIDs(t *testing.T, file string) []string {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	var ids []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l ExportLine
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l))
		body, err := base64.StdEncoding.DecodeString(l.BodyBase64)
		require.NoError(t, err)
		m, err := envelope.Decode(body)
		require.NoError(t, err)
		require.Equal(t, l.ID, m.TaskID)
		require.Equal(t, l.ID, l.Properties.MessageID)
		require.NotEmpty(t, l.Body)
		require.NotNil(t, l.Headers[envelope.HeaderXDeath])
		ids = append(ids, l.ID)
	}
	require.NoError(t, sc.Err())
	slices.Sort(ids)
	return ids
}

// The errors an operator meets name the queue and the cause, with the
// documented exit codes.
func TestErrors(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	sms, mail := smsDLQ(t, e), e.mail.DeadLetterQueue
	_, err := e.Ch.QueueDelete(sms, false, false, false)
	require.NoError(t, err)

	down := *e
	down.cfg.AMQPURL = "amqp://guest:s3cret-pw@127.0.0.1:1/"
	for _, tc := range []struct {
		name string
		env  *env
		args []string
		code int
		want string
	}{
		{"no command", e, nil, ExitUsage, "usage: dlq"},
		{"unknown command", e, []string{"drop"}, ExitUsage, `unknown command "drop"`},
		{"unknown queue", e, []string{"list", "--queue", "queue.nope"}, ExitUsage, `--queue "queue.nope" is not a dead-letter queue of the model (known: ` + strings.Join(DeadLetterQueues(e.Model), ", ") + ")"},
		{"a main queue is no DLQ", e, []string{"purge", "--queue", e.mail.Queue, "--all", "--yes"}, ExitUsage, "is not a dead-letter queue"},
		{"unknown channel", e, []string{"list", "--channel", "fax"}, ExitUsage, `--channel "fax"`},
		{"list without a queue", e, []string{"list"}, ExitUsage, "list needs --channel mail|sms|wecom or --queue NAME"},
		{"replay without a selection", e, []string{"replay", "--channel", "mail"}, ExitUsage, "exactly one of --id, --all, --reason"},
		{"replay with two selections", e, []string{"replay", "--channel", "mail", "--all", "--reason", "expired"}, ExitUsage, "exactly one of"},
		{"unknown reason", e, []string{"list", "--channel", "mail", "--reason", "exploded"}, ExitUsage, `--reason "exploded"`},
		{"bad rate", e, []string{"replay", "--channel", "mail", "--all", "--rate", "fast"}, ExitUsage, `--rate "fast"`},
		{"bad since", e, []string{"list", "--channel", "mail", "--since", "yesterday"}, ExitUsage, `--since "yesterday"`},
		{"show without id", e, []string{"show", "--channel", "mail"}, ExitUsage, "exactly one message id"},
		{"both channel and queue", e, []string{"list", "--channel", "mail", "--queue", mail}, ExitUsage, "not both"},
		{"queue missing on the broker", e, []string{"list", "--channel", "sms"}, ExitError, "queue " + sms + " does not exist: run `topology declare`"},
		{"stats with a queue missing", e, []string{"stats"}, ExitError, "queue " + sms + " does not exist"},
		{"replay of an id not there", e, []string{"replay", "--channel", "mail", "--id", "nope"}, ExitError, "not found in " + mail + ": nope"},
		{"purge of an id not there", e, []string{"purge", "--channel", "mail", "--id", "nope,nada", "--yes"}, ExitError, "not found in " + mail + ": nope, nada"},
		{"broker down", &down, []string{"stats"}, ExitError, "connect to amqp://guest:xxxxx@127.0.0.1:1/: broker unavailable"},
		{"broker down on replay", &down, []string{"replay", "--channel", "mail", "--all"}, ExitError, "amqp://guest:xxxxx@127.0.0.1:1/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.env.run(t, tc.args...)
			require.Equal(t, tc.code, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
			require.Contains(t, r.stderr, tc.want)
			require.NotContains(t, r.stderr+r.stdout, "s3cret-pw")
		})
	}

	r := e.run(t, "--help")
	require.Equal(t, ExitOK, r.code)
	require.Contains(t, r.stdout, "usage: dlq <command>")
}

// On quorum queues reading works the same and gives every message back;
// a message worn by repeated give-backs is warned about.
func TestQuorumQueues(t *testing.T) {
	t.Parallel()
	// Quorum whatever TEST_QUEUE_TYPE says: a quorum DLQ's reads are the subject.
	e := setup(t, func(c *topology.Config) { c.QueueType = topology.Quorum })
	ids, rcpt, _ := rejected(t, e, 2)
	dlq := e.mail.DeadLetterQueue
	var last result
	for range DeliveryCountWarn + 1 {
		last = e.run(t, "list", "--channel", "mail", "--json")
		require.Equal(t, ExitOK, last.code, last.stderr)
	}
	got := entries(t, last.stdout)
	require.Len(t, got, 2)
	worn := got[ids[0]].DeliveryCount >= DeliveryCountWarn
	// RabbitMQ 3.x counts every nack with requeue; newer brokers may not.
	if worn {
		require.Contains(t, last.stderr, "have been delivered 10+ times")
	} else {
		require.NotContains(t, last.stderr, "delivered")
	}
	require.Equal(t, ids, idsIn(t, e.Stack, dlq))

	r := e.run(t, "replay", "--channel", "mail", "--all")
	require.Equal(t, ExitOK, r.code, r.stderr)
	testenv.WaitFor(t, 15*time.Second, "mailed", func() bool { return e.Mail.Count() == 2 })
	for _, id := range ids {
		require.Equal(t, 1, e.MailsTo(rcpt[id]))
	}
	require.Zero(t, e.Depth(dlq))
}

func smsDLQ(t *testing.T, e *env) string {
	t.Helper()
	ct, err := e.Model.Channel(topology.SMS)
	require.NoError(t, err)
	return ct.DeadLetterQueue
}

// Issue 12: a replayed dead letter goes back to the level it died in,
// and list says which.
func TestReplayReturnsToItsLevel(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	dlq := e.mail.DeadLetterQueue
	e.Mail.FailAlways(550, "5.1.1 no such user")
	c := e.StartConsumer("c", 2)
	low := e.Notice(topology.Mail, "low-"+testenv.ID()+"@example.com", "t", func(m *envelope.Message) { m.Level = string(topology.Low) })
	testenv.WaitFor(t, 10*time.Second, "dead-lettered", func() bool { return e.Depth(dlq) == 1 })
	c.Stop() // nothing consumes the replay: it must wait in queue.mail.low

	r := e.run(t, "list", "--channel", "mail", "--json")
	require.Equal(t, ExitOK, r.code, r.stderr)
	got := entries(t, r.stdout)[low]
	require.Equal(t, "low", got.Level)
	require.Equal(t, "queue.mail.low", got.DeathQueue)

	r = e.run(t, "replay", "--channel", "mail", "--all")
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "replayed 1")
	require.Equal(t, []string{low}, idsIn(t, e.Stack, e.mail.Level(topology.Low).Queue))
	require.Zero(t, e.Depth(e.mail.Queue))
}
