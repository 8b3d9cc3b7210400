package api

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// levelNotice is a notice to bob with priority set (nil: none).
func levelNotice(priority any) map[string]any {
	m := notice("bob@example.com")
	if priority != nil {
		m["priority"] = priority
	}
	return m
}

// Issue 12: priority picks the level's queue, the status record keeps the
// level, and ttlSeconds (or MESSAGE_MAX_AGE) is the message's deadline.
// Issue 36: no notice goes to the codes' queue (queue.mail), whatever its
// priority, and no message carries an AMQP priority (levels are queues; on
// a 4.x quorum queue a priority would split it and reorder it).
func TestSendPicksTheLevelQueue(t *testing.T) {
	h := setup(t, options{})
	for _, tc := range []struct {
		priority any
		level    topology.Level
		queue    string
	}{
		{nil, topology.Normal, "queue.mail.normal"},
		{"high", topology.High, "queue.mail.high"},
		{"normal", topology.Normal, "queue.mail.normal"},
		{"low", topology.Low, "queue.mail.low"},
		{0, topology.Low, "queue.mail.low"},
		{3, topology.Low, "queue.mail.low"},
		{4, topology.Normal, "queue.mail.normal"},
		{6, topology.Normal, "queue.mail.normal"},
		{7, topology.High, "queue.mail.high"},
		{9, topology.High, "queue.mail.high"},
	} {
		r := h.do("POST", "/api/messages/send", levelNotice(tc.priority))
		require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
		var out SendResult
		r.data(t, &out)
		d := h.get(tc.queue)
		require.Equal(t, out.TaskID, d.MessageId, "priority %v", tc.priority)
		require.Zero(t, d.Priority, "no AMQP priority (priority %v)", tc.priority)
		m, err := envelope.Decode(d.Body)
		require.NoError(t, err)
		require.Equal(t, string(tc.level), m.Level, "a notice always names its level")
		require.NotNil(t, m.Deadline)
		require.WithinDuration(t, time.Now().Add(24*time.Hour), *m.Deadline, 5*time.Second, "MESSAGE_MAX_AGE by default")
		g := h.do("GET", "/api/messages/"+out.TaskID, nil)
		var view MessageView
		g.data(t, &view)
		require.Equal(t, string(tc.level), string(view.Priority))
	}

	body := levelNotice("low")
	body["ttlSeconds"] = 90
	r := h.do("POST", "/api/messages/send", body)
	require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
	m, err := envelope.Decode(h.get("queue.mail.low").Body)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(90*time.Second), *m.Deadline, 5*time.Second)

	r = h.do("POST", "/api/verification-codes", codeRequest("carol@example.com", "login"))
	require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
	var vc VerificationCode
	r.data(t, &vc)
	code := h.get("queue.mail")
	require.Equal(t, vc.TaskID, code.MessageId, "codes have the codes' queue")
	require.Zero(t, code.Priority)
	g := h.do("GET", "/api/messages/"+vc.TaskID, nil)
	var view MessageView
	g.data(t, &view)
	require.Equal(t, "high", string(view.Priority))
}

func TestSendRejectsBadPriorityAndTTL(t *testing.T) {
	h := setup(t, options{})
	for _, tc := range []struct {
		name  string
		patch func(map[string]any)
		want  string
	}{
		{"unknown level", func(m map[string]any) { m["priority"] = "urgent" }, "priority"},
		{"upper case", func(m map[string]any) { m["priority"] = "HIGH" }, "priority"},
		{"too high", func(m map[string]any) { m["priority"] = 10 }, "priority"},
		{"negative", func(m map[string]any) { m["priority"] = -1 }, "priority"},
		{"fraction", func(m map[string]any) { m["priority"] = 4.5 }, "priority"},
		{"object", func(m map[string]any) { m["priority"] = map[string]any{} }, "priority"},
		{"ttl zero", func(m map[string]any) { m["ttlSeconds"] = 0 }, "ttlSeconds"},
		{"ttl too long", func(m map[string]any) { m["ttlSeconds"] = 31 * 24 * 3600 }, "ttlSeconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := levelNotice(nil)
			tc.patch(b)
			r := h.do("POST", "/api/messages/send", b)
			require.Equal(t, http.StatusBadRequest, r.Status, r.Msg)
			require.Contains(t, r.Msg, tc.want)
		})
	}
}

// A full normal queue refuses the publish: the caller gets a 503 naming
// the queue and its bound, with Retry-After, and nothing is kept.
func TestFullLevelQueueAnswers503WithRetryAfter(t *testing.T) {
	h := setup(t, options{model: func(c *topology.Config) {
		cc := c.Channels[topology.Mail]
		cc.LevelMaxLength = map[topology.Level]int{topology.Normal: 3}
		c.Channels[topology.Mail] = cc
	}})
	accepted := 0
	var r response
	for range 10 {
		r = h.do("POST", "/api/messages/send", levelNotice("normal"))
		if r.Status != http.StatusAccepted {
			break
		}
		accepted++
	}
	require.GreaterOrEqual(t, accepted, 3, "202 up to the bound")
	require.LessOrEqual(t, accepted, 3+testenv.Overshoot(), "then 503s")
	require.Equal(t, http.StatusServiceUnavailable, r.Status, r.Msg)
	require.Contains(t, r.Msg, "queue.mail.normal is full (bound 3, MAIL_NORMAL_QUEUE_MAX_LENGTH)")
	ra, err := strconv.Atoi(r.Header.Get("Retry-After"))
	require.NoError(t, err)
	require.Positive(t, ra)
	require.Equal(t, accepted, h.depth("queue.mail.normal"), "nothing dropped")
	require.Len(t, h.keysMatching("status:*"), accepted, "the refused message left no status record")

	r = h.do("POST", "/api/messages/send", levelNotice("low"))
	require.Equal(t, http.StatusAccepted, r.Status, "other levels are not affected")
}

// /api/queues/stats reports every level of every channel: depth, bound,
// consumers, the oldest message's age, and the warning above 80%.
func TestQueueStatsReportEachLevel(t *testing.T) {
	h := setup(t, options{model: func(c *topology.Config) {
		// Classic whatever TEST_QUEUE_TYPE says: the oldest message's age
		// is asserted, and only classic queues report it (QueueStat).
		c.QueueType = topology.Classic
		cc := c.Channels[topology.Mail]
		cc.LevelMaxLength = map[topology.Level]int{topology.Normal: 10}
		c.Channels[topology.Mail] = cc
	}})
	sent := time.Now().Add(-time.Minute)
	for i := range 9 {
		require.NoError(t, h.ch.Publish("exchange.direct.mail", "mail.normal", false, false,
			amqp.Publishing{Body: []byte(strconv.Itoa(i)), Timestamp: sent}))
	}
	testenv.WaitFor(t, 5*time.Second, "9 messages in queue.mail.normal", func() bool { return h.depth("queue.mail.normal") == 9 })
	var byName map[string]QueueStat
	// The management API refreshes its statistics every few seconds.
	testenv.WaitFor(t, 20*time.Second, "the oldest message's age", func() bool {
		r := h.do("GET", "/api/queues/stats", nil)
		require.Equal(t, http.StatusOK, r.Status)
		var data struct{ Queues []QueueStat }
		r.data(t, &data)
		byName = map[string]QueueStat{}
		for _, q := range data.Queues {
			byName[q.Name] = q
		}
		return byName["queue.mail.normal"].OldestAgeSeconds != nil
	})
	normal := byName["queue.mail.normal"]
	require.Equal(t, "normal", normal.Level)
	require.Equal(t, "email", normal.Channel)
	require.Equal(t, 9, normal.Messages)
	require.Equal(t, 10, normal.MaxLength)
	require.Equal(t, "warning", normal.Status)
	require.GreaterOrEqual(t, *normal.OldestAgeSeconds, 59.0)
	require.LessOrEqual(t, *normal.OldestAgeSeconds, time.Since(sent).Seconds()+1, "timestamps have whole seconds")
	for ch, apiName := range map[string]string{"mail": "email", "sms": "sms", "wecom": "wecom"} {
		for _, lt := range []struct{ queue, level string }{{"queue." + ch, "code"}, {"queue." + ch + ".high", "high"}, {"queue." + ch + ".normal", "normal"}, {"queue." + ch + ".low", "low"}} {
			q, ok := byName[lt.queue]
			require.True(t, ok, lt.queue)
			require.Equal(t, lt.level, q.Level)
			require.Equal(t, apiName, q.Channel, lt.queue)
			require.Equal(t, "main", q.Role)
			require.Positive(t, q.MaxLength, "every level is bounded")
		}
	}
	require.Equal(t, topology.DefaultLevelMaxLength, byName["queue.sms.low"].MaxLength)
	require.Equal(t, "ok", byName["queue.sms.low"].Status)
	require.Nil(t, byName["queue.sms.low"].OldestAgeSeconds, "an empty queue has no oldest message")
}

// A batch's messages go to the level the batch asks for, and each
// recipient's record says it.
func TestBatchPicksTheLevelQueue(t *testing.T) {
	h := setup(t, options{})
	r := h.do("POST", "/api/messages/batch", noticeBody("EMAIL", func(m map[string]any) {
		m["recipients"] = []string{"x@example.com", "y@example.com"}
		m["priority"] = "low"
	}))
	require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
	testenv.WaitFor(t, 5*time.Second, "both in queue.mail.low", func() bool { return h.depth("queue.mail.low") == 2 })
	require.Zero(t, h.depth("queue.mail.normal"))
	var out struct {
		Accepted []struct{ TaskID string } `json:"accepted"`
	}
	r.data(t, &out)
	require.Len(t, out.Accepted, 2)
	var view MessageView
	h.do("GET", "/api/messages/"+out.Accepted[0].TaskID, nil).data(t, &view)
	require.Equal(t, "low", string(view.Priority))
}

// Admission: a level queue close to its bound ({CH}_QUEUE_ADMIT_FILL of
// it) refuses publishes at the API with a 503 that names the queue and
// carries Retry-After, before the broker would drop the oldest code
// (drop-head) or refuse a notice. Requests sent at once never overshoot:
// each reserves its place against the estimate.
func TestAdmissionRefusesBeforeTheBound(t *testing.T) {
	settled := func(t *testing.T, h *harness, queue string) {
		t.Helper()
		testenv.WaitFor(t, 10*time.Second, "the gauge's estimate of "+queue+" equal to its depth", func() bool {
			d, ok := h.gauge.Depth(queue)
			return ok && d == h.depth(queue)
		})
	}
	h := setup(t, options{admitFill: 0.5, model: func(c *topology.Config) {
		cc := c.Channels[topology.Mail]
		cc.MaxLength = 20
		cc.LevelMaxLength = map[topology.Level]int{topology.Normal: 20}
		c.Channels[topology.Mail] = cc
	}})
	testenv.WaitFor(t, 5*time.Second, "a first depth reading", func() bool {
		_, ok := h.gauge.Depth("queue.mail.normal")
		return ok
	})
	for _, tc := range []struct {
		name, queue, path string
		body              func(i int) map[string]any
	}{
		{"codes", "queue.mail", "/api/verification-codes", func(i int) map[string]any { return codeRequest(fmt.Sprintf("u%d@example.com", i), "login") }},
		{"notices", "queue.mail.normal", "/api/messages/send", func(i int) map[string]any { return levelNotice("normal") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 40
			rs := make([]response, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() { defer wg.Done(); rs[i] = h.do("POST", tc.path, tc.body(i)) }()
			}
			wg.Wait()
			accepted := 0
			for _, r := range rs {
				if r.Status == http.StatusAccepted {
					accepted++
					continue
				}
				require.Equal(t, http.StatusServiceUnavailable, r.Status, r.Msg)
				require.Contains(t, r.Msg, tc.queue+" is nearly full")
				require.Contains(t, r.Msg, "MAIL_QUEUE_ADMIT_FILL=0.5 of the bound 20")
				require.NotEmpty(t, r.Header.Get("Retry-After"))
			}
			t.Logf("%s: %d of %d accepted", tc.name, accepted, n)
			require.LessOrEqual(t, accepted, 10, "never past the admission limit")
			require.Positive(t, accepted)
			require.Equal(t, accepted, h.depth(tc.queue), "every 202 is queued, none dropped")
			require.Zero(t, h.depth("queue.mail.dlq"))

			// One by one from here, the estimate is exact once a reading
			// has caught up with the burst (one taken while its publishes
			// were confirmed counts them twice until the next: the gauge
			// errs high, never low): the queue fills to the limit, and the
			// next is refused.
			for i := n; h.depth(tc.queue) < 10; i++ {
				settled(t, h, tc.queue)
				r := h.do("POST", tc.path, tc.body(i))
				require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
			}
			settled(t, h, tc.queue)
			r := h.do("POST", tc.path, tc.body(2*n))
			require.Equal(t, http.StatusServiceUnavailable, r.Status, r.Msg)
			require.Contains(t, r.Msg, tc.queue+" is nearly full")
			require.Equal(t, 10, h.depth(tc.queue))
		})
	}
}
