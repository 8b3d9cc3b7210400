package alerting

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/mailcatcher"
	"github.com/msgpulse/msgpulse/internal/provider/wecom/wecomtest"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/pkg/client"
)

const promAPIKey = "prom-key-0123456789abcdefgh"

// dashboardExprs are the PromQL expressions of the Grafana dashboard.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(deploy("grafana", "msgpulse.json"))
	require.NoError(t, err)
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(data, &dash))
	out := map[string]string{}
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for i, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr, "panel %q", p.Title)
			out[fmt.Sprintf("panel %q #%d", p.Title, i+1)] = tg.Expr
		}
	}
	return out
}

// threshold is an alert's trailing comparison with a number: the rule's
// series, without it, must exist (it is the threshold that keeps the
// alert quiet, not a missing metric).
var threshold = regexp.MustCompile(`\s*(>|<|>=|<=|==|!=)\s*[0-9.e+]+\s*$`)

// alertExprs are the alert rules' expressions, thresholds removed.
func alertExprs(t *testing.T) map[string]string {
	out := map[string]string{}
	for _, g := range load(t).Groups {
		for _, r := range g.Rules {
			if readsPending(r.Expr) {
				continue // no binary exports it yet (pendingMetrics)
			}
			if series, ok := volumeGuarded[r.Alert]; ok {
				out["alert "+r.Alert] = series
				continue
			}
			out["alert "+r.Alert] = threshold.ReplaceAllString(r.Expr, "")
		}
	}
	return out
}

// volumeGuarded are the alerts that judge a rate only past a day's volume
// (1,000 mails: a handful of complaints among a few mails is no rate), so
// no short run gives their ratio a value: here the series they divide
// must exist, from every tenant's start at zero; promtool's tests
// (alerts_test.yml) fire them.
var volumeGuarded = map[string]string{
	"MailBounceRateHigh":    `sum by (tenant) (increase(msgpulse_receipts_total{kind="bounced"}[24h]))`,
	"MailComplaintRateHigh": `sum by (tenant) (increase(msgpulse_receipts_total{kind="complained"}[24h]))`,
}

func readsPending(expr string) bool {
	for _, name := range metricName.FindAllString(expr, -1) {
		if _, ok := pendingMetrics[name]; ok {
			return true
		}
	}
	return false
}

// prom is a Prometheus server the test started.
type prom struct {
	url string
}

func (p prom) query(t *testing.T, expr string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/api/v1/query?query="+url.QueryEscape(expr), nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, err
	}
	if out.Status != "success" {
		t.Fatalf("%s: Prometheus refused it: %s", expr, out.Error) // a syntax error will not heal
	}
	n := 0
	for _, r := range out.Data.Result {
		if s, _ := r.Value[1].(string); s != "NaN" {
			n++
		}
	}
	return n, nil
}

func startPrometheus(t *testing.T, targets map[string][2]string) prom {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus not installed: `make services` (scripts/services.sh) installs Debian's prometheus package")
	}
	dir := t.TempDir()
	rules, err := filepath.Abs(deploy("prometheus", "alerts.yml"))
	require.NoError(t, err)
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - %q\nscrape_configs:\n", rules)
	for job, tg := range targets {
		fmt.Fprintf(&cfg, "  - job_name: %q\n    metrics_path: %q\n    static_configs:\n      - targets: [%q]\n", job, tg[1], tg[0])
	}
	conf := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(conf, []byte(cfg.String()), 0o600))
	addr := testenv.FreeAddr(t)
	var logs testenv.SyncBuffer
	cmd := exec.Command(bin, "--config.file="+conf, "--storage.tsdb.path="+filepath.Join(dir, "data"), //nolint:gosec // Debian's prometheus, our arguments
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus output:\n%s", logs.String())
		}
	})
	pr := prom{url: "http://" + addr}
	testenv.WaitFor(t, 30*time.Second, "prometheus ready", func() bool {
		resp, err := http.Get(pr.url + "/-/ready") //nolint:noctx // a readiness poll
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return pr
}

// Every PromQL expression of the dashboard and of the alert rules returns
// data from a real Prometheus scraping a running api and consumer under a
// small load, and RabbitMQ's own per-object endpoint; the alert rules load
// and evaluate; the labelled counters the alerts read exist at zero before
// anything happened.
func TestDashboardAndAlertsQueryARealPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts RabbitMQ clients, the real binaries and Prometheus")
	}
	if _, err := exec.LookPath("prometheus"); err != nil {
		t.Skip("prometheus not installed: `make services` (scripts/services.sh) installs Debian's prometheus package")
	}
	resp, err := http.Get("http://127.0.0.1:15692/metrics/per-object") //nolint:noctx // one probe
	require.NoError(t, err, "RabbitMQ's rabbitmq_prometheus plugin is not listening on :15692: `make services` enables it")
	_ = resp.Body.Close()

	bins, err := testenv.BuildCommands("msgpulse-prom-", "../../cmd/api", "../../cmd/consumer", "../../cmd/topology")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(bins) })
	broker, redis := testenv.NewBroker(t), testenv.NewRedis(t)
	mail, err := mailcatcher.New(mailcatcher.Config{SMTPAddr: "127.0.0.1:0", Max: 10_000})
	require.NoError(t, err)
	t.Cleanup(func() { _ = mail.Close() })
	wc := wecomtest.New(t)
	host, port, _ := net.SplitHostPort(mail.Addr())
	env := []string{
		"AMQP_URL=" + broker.URL, "REDIS_URL=" + testenv.RedisURL, "REDIS_PREFIX=" + redis.Prefix,
		"RABBITMQ_MANAGEMENT_URL=" + testenv.ManagementURL, "LOG_FORMAT=json", "LOG_LEVEL=info",
		"SMTP_HOST=" + host, "SMTP_PORT=" + port, "SMTP_TLS=none", "SMS_PROVIDER=log",
		"API_KEYS=prom:" + promAPIKey, "PATH=" + os.Getenv("PATH"), "RETRY_BACKOFF=200ms", "MAX_RETRIES=2",
		"CHANNELS=mail,sms,wecom", "WECOM_API_BASE=" + wc.URL, "WECOM_CORP_ID=" + wecomtest.CorpID,
		"WECOM_CORP_SECRET=" + wecomtest.CorpSecret, "WECOM_AGENT_ID=" + strconv.Itoa(wecomtest.AgentID), "WECOM_ROBOTS=ops=" + wecomtest.RobotKey,
	}
	code, out := testenv.RunCommand(t, filepath.Join(bins, "topology"), env, "declare")
	require.Equal(t, 0, code, out)
	apiAddr, consAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	testenv.StartProc(t, "api", filepath.Join(bins, "api"), append(env, "HTTP_ADDR="+apiAddr))
	cons := testenv.StartProc(t, "consumer", filepath.Join(bins, "consumer"), append(env, "METRICS_ADDR="+consAddr, "CONSUMER_ID=prom"))
	c, err := client.New("http://"+apiAddr, promAPIKey)
	require.NoError(t, err)
	testenv.WaitFor(t, 20*time.Second, "api ready", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return c.Ready(ctx) == nil
	})
	testenv.WaitFor(t, 20*time.Second, "consumer started", func() bool { return strings.Contains(cons.Output(), `"consumer started"`) })

	p := startPrometheus(t, map[string][2]string{
		"msgpulse-api": {apiAddr, "/metrics"}, "msgpulse-consumer": {consAddr, "/metrics"},
		"rabbitmq": {"127.0.0.1:15692", "/metrics/per-object"},
	})

	// Before any message: the counters alerts read are there, at zero.
	for _, expr := range []string{`msgpulse_deadlettered_total == 0`, `rabbitmq_delay_queue_overflow_total == 0`} {
		testenv.WaitFor(t, 20*time.Second, expr+" before any load", func() bool {
			n, err := p.query(t, expr)
			return err == nil && n > 0
		})
	}

	// A small, bounded load: codes, notices (some delayed), SMS, a WeCom
	// robot post, one transient SMTP failure and one permanent one.
	var failedOnce atomic.Bool
	mail.SetHook(func(e mailcatcher.Envelope) error {
		if e.Stage != mailcatcher.StageData {
			return nil
		}
		switch {
		case e.To[0] == "flaky@example.com" && failedOnce.CompareAndSwap(false, true):
			return mailcatcher.Reject(451, "4.3.0 try again later")
		case e.To[0] == "gone@example.com":
			return mailcatcher.Reject(550, "5.1.1 no such user")
		}
		return nil
	})
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	var sent atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		vars := map[string]string{"title": "t", "content": "c"}
		half := 0.5
		once := []client.SendRequest{
			{MessageType: client.MessageEmail, TemplateCode: "notice", Recipient: "flaky@example.com", Variables: vars},
			{MessageType: client.MessageEmail, TemplateCode: "notice", Recipient: "gone@example.com", Variables: vars},
			{MessageType: client.MessageWeComRobot, TemplateCode: "notice", Recipient: "ops", Variables: vars},
		}
		for i := 0; i < 600 && ctx.Err() == nil; i++ { // at most 2 minutes
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, _ = c.RequestVerificationCode(rctx, client.VerificationCodeRequest{Channel: client.ChannelEmail, Recipient: fmt.Sprintf("code%d@example.com", i), Purpose: "login"})
			_, _ = c.SendMessage(rctx, client.SendRequest{MessageType: client.MessageEmail, TemplateCode: "notice", Recipient: fmt.Sprintf("n%d@example.com", i), Variables: vars, DelaySeconds: &half})
			_, _ = c.SendMessage(rctx, client.SendRequest{MessageType: client.MessageSMS, TemplateCode: "notice", Recipient: "+8613800138000", Variables: vars})
			if i < len(once) {
				_, _ = c.SendMessage(rctx, once[i])
			}
			cancel()
			sent.Add(1)
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond): // pacing a bounded load, not waiting for an outcome
			}
		}
	}()

	exprs := dashboardExprs(t)
	for k, v := range alertExprs(t) {
		exprs[k] = v
	}
	start := time.Now()
	for name, expr := range exprs {
		var n int
		testenv.WaitFor(t, 90*time.Second, name+": "+expr+" returns data", func() bool {
			var err error
			n, err = p.query(t, expr)
			return err == nil && n > 0
		})
		t.Logf("%-70s %d series", name, n)
	}
	t.Logf("%d expressions (%d dashboard, %d alert) returned data within %v; %d load rounds sent", len(exprs), len(dashboardExprs(t)), len(alertExprs(t)),
		time.Since(start).Round(100*time.Millisecond), sent.Load())

	// The rules loaded and evaluate without error.
	resp, err = http.Get(p.url + "/api/v1/rules") //nolint:noctx // one read
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	var rules struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rules))
	n := 0
	for _, g := range rules.Data.Groups {
		for _, r := range g.Rules {
			n++
			require.NotEqual(t, "err", r.Health, "%s: %s", r.Name, r.LastError)
		}
	}
	total := 0
	for _, g := range load(t).Groups {
		total += len(g.Rules)
	}
	require.Equal(t, total, n, "every alert rule loaded, those reading a pending metric too")
}
