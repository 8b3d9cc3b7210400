package console_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/api"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/dlq"
	"github.com/msgpulse/msgpulse/internal/seal"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// setDeliveryLimit puts a policy on the test's vhost giving every DLQ (and
// nothing else) delivery-limit n, and waits until a quorum DLQ shows it.
func setDeliveryLimit(t *testing.T, h *harness, n int) {
	t.Helper()
	mu, err := url.Parse(testenv.ManagementURL)
	require.NoError(t, err)
	body, err := json.Marshal(map[string]any{"pattern": `^queue\..*\.dlq$`, "apply-to": "queues", "priority": 10,
		"definition": map[string]any{"delivery-limit": n}})
	require.NoError(t, err)
	base := strings.TrimSuffix(mu.Scheme+"://"+mu.Host, "/") + "/api"
	do := func(method, path string, body []byte) *http.Response {
		req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
		require.NoError(t, err)
		pw, _ := mu.User.Password()
		req.SetBasicAuth(mu.User.Username(), pw)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return resp
	}
	vh := url.PathEscape(h.stack.Broker.VHost)
	resp := do(http.MethodPut, "/policies/"+vh+"/dlq-delivery-limit", body)
	_ = resp.Body.Close()
	require.Less(t, resp.StatusCode, 300, "PUT policy")
	if h.stack.Model.QueueType != topology.Quorum {
		return // a classic queue has no delivery limit: the policy is set, and never shows on it
	}
	testenv.WaitFor(t, 20*time.Second, "the policy on "+h.mail.DeadLetterQueue, func() bool {
		resp := do(http.MethodGet, "/queues/"+vh+"/"+url.PathEscape(h.mail.DeadLetterQueue), nil)
		defer func() { _ = resp.Body.Close() }()
		var q struct {
			Policy string `json:"policy"`
		}
		return json.NewDecoder(resp.Body).Decode(&q) == nil && q.Policy == "dlq-delivery-limit"
	})
}

// Reading dead letters never spends them: with delivery-limit 3 on the
// DLQs, ten rounds of every read (dlq stats, list, show; the API's stats;
// the console's dead-letter pages) leave the dead letter where it is, and
// a replay then delivers it once. On a quorum DLQ the control at the end
// shows the limit does bite a reader that gives messages back.
func TestReadsNeverSpendDeadLetters(t *testing.T) {
	// Both types in every run, whatever TEST_QUEUE_TYPE says: only a quorum
	// DLQ has a delivery limit, and the classic one is the control.
	for _, qt := range []topology.QueueType{topology.Quorum, topology.Classic} {
		t.Run(string(qt), func(t *testing.T) {
			t.Parallel()
			const rounds, limit = 10, 3
			h := setupModel(t, func(c *topology.Config) { c.QueueType = qt })
			require.Equal(t, qt, h.stack.Model.QueueType)
			setDeliveryLimit(t, h, limit)
			dead := h.mail.DeadLetterQueue
			id := h.deadLetter(t, "keep-"+testenv.ID()+"@example.com", "kept")

			mc := topology.DefaultConfig()
			mc.QueueType = qt
			cfg := config.DLQ{
				Common: config.Common{AMQPURL: h.stack.Broker.URL, RedisURL: h.stack.Redis.URL, RedisMode: h.stack.Redis.Mode, RedisPrefix: h.stack.Redis.Prefix, LogLevel: "info", LogFormat: "json"},
				Model:  mc, CodeSecret: seal.DevSecret, CodeSecretIsDev: true,
				ConfirmTimeout: 10 * time.Second, ScanMax: 100_000, StatusTimeout: 2 * time.Second,
			}
			cli := func(args ...string) string {
				t.Helper()
				var out, errOut bytes.Buffer
				code := dlq.Main(testenv.Context(t, 30*time.Second), cfg, zap.NewNop(), args, &out, &errOut)
				require.Equal(t, dlq.ExitOK, code, "dlq %v: %s", args, errOut.String())
				return out.String()
			}
			// GET /api/dlq/stats is served by this function (uncached here,
			// so every poll reads).
			apiStats := api.CachedDLQStats(h.stack.Session, h.stack.Model, h.stack.Status, 0)
			statsSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				v, err := apiStats(r.Context())
				if err != nil {
					http.Error(w, err.Error(), http.StatusServiceUnavailable)
					return
				}
				_ = json.NewEncoder(w).Encode(v)
			}))
			t.Cleanup(statsSrv.Close)
			c := h.client(t, true)
			page := func(path string) string {
				t.Helper()
				resp, err := c.Get(h.http.URL + path)
				require.NoError(t, err)
				body := readBody(t, resp)
				require.Equal(t, http.StatusOK, resp.StatusCode, path)
				return body
			}

			for round := 1; round <= rounds; round++ {
				var stats struct {
					Queues []dlq.StatsReport `json:"queues"`
				}
				require.NoError(t, json.Unmarshal([]byte(cli("stats", "--json")), &stats))
				for _, q := range stats.Queues {
					if q.Queue == dead {
						require.Equal(t, 1, q.Total, "round %d: dlq stats", round)
						require.Equal(t, 1, q.Scanned, "round %d: dlq stats read its reason", round)
					}
				}
				require.Contains(t, cli("list", "--channel", "mail", "--json"), id, "round %d: dlq list", round)
				require.Contains(t, cli("show", "--channel", "mail", id), id, "round %d: dlq show", round)

				resp, err := http.Get(statsSrv.URL)
				require.NoError(t, err)
				var as struct {
					Queues []api.DLQStat `json:"queues"`
				}
				require.NoError(t, json.NewDecoder(resp.Body).Decode(&as))
				_ = resp.Body.Close()
				found := false
				for _, q := range as.Queues {
					if q.Queue == dead {
						found = true
						require.Equal(t, 1, q.Total, "round %d: API stats", round)
						require.Equal(t, 1, q.ByReason["rejected"], "round %d: API stats by reason", round)
					}
				}
				require.True(t, found)

				page("/console/dlq")
				require.Contains(t, page("/console/dlq/"+dead), id, "round %d: console list", round)
				require.Contains(t, page("/console/dlq/"+dead+"/message/"+id), id, "round %d: console message", round)
				require.Equal(t, 1, h.stack.Depth(dead), "round %d: still dead-lettered", round)
			}
			t.Logf("%s: after %d rounds of 7 reads with delivery-limit %d, depth of %s = %d", qt, rounds, limit, dead, h.stack.Depth(dead))

			out := cli("replay", "--channel", "mail", "--id", id, "--json")
			var rep dlq.ReplayReport
			require.NoError(t, json.Unmarshal([]byte(out), &rep))
			require.Equal(t, 1, rep.Replayed, out)
			h.stack.StartConsumer("c", 1)
			testenv.WaitFor(t, 20*time.Second, "the replayed notice mailed", func() bool { return h.stack.Mail.Count() >= 1 })
			require.Equal(t, 0, h.stack.Depth(dead))
			// Replay took it out of the DLQ; the log's copy is left out now.
			require.NotContains(t, cli("list", "--channel", "mail", "--json"), id, "a replayed dead letter is no longer listed")
			require.Equal(t, 1, h.stack.Mail.Count(), "mailed once")
			t.Logf("%s: replay delivered it %d time(s)", qt, h.stack.Mail.Count())

			if qt != topology.Quorum {
				return
			}
			// Control: the old way of reading (take, give back) does spend
			// a quorum DLQ's attempts under this policy.
			ch, err := h.stack.Conn.Channel()
			require.NoError(t, err)
			defer func() { _ = ch.Close() }()
			require.NoError(t, ch.Publish(h.mail.DeadLetterExchange, "", false, false, amqp.Publishing{MessageId: "control", Body: []byte("{}")}))
			testenv.WaitFor(t, 10*time.Second, "the control dead letter", func() bool { return h.stack.Depth(dead) == 1 })
			reads := 0
			for ; reads < 2*limit; reads++ {
				// Wait for the control to be ready again (a quorum queue
				// applies a return through its log) or gone for good.
				var d amqp.Delivery
				got := poll(5*time.Second, func() bool {
					var ok bool
					d, ok, err = ch.Get(dead, false)
					require.NoError(t, err)
					return ok
				})
				if !got {
					break // dropped
				}
				require.NoError(t, d.Nack(false, true))
			}
			require.Equal(t, 0, h.stack.Depth(dead), "the control was dropped by the delivery limit")
			require.LessOrEqual(t, reads, limit+1, "dropped within the limit")
			t.Logf("control: a take-and-give-back reader lost the dead letter after %d reads", reads)
		})
	}
}

// poll reports whether cond held before timeout.
func poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not a guess at an outcome
	}
}
