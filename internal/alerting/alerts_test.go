package alerting

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/msgpulse/msgpulse/internal/delay"
	"github.com/msgpulse/msgpulse/internal/dispatch"
	"github.com/msgpulse/msgpulse/internal/fraud"
	"github.com/msgpulse/msgpulse/internal/receipt/applier"
)

type rules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func load(t *testing.T) rules {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "prometheus", "alerts.yml"))
	require.NoError(t, err)
	var r rules
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&r))
	return r
}

// Seed 003 §6.2's four alerts, with its thresholds and severities, and the
// DLQ growth alert.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	r := load(t)
	byName := map[string]struct{ expr, severity string }{}
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			require.NotEmpty(t, rule.Annotations["summary"], rule.Alert)
			require.NotEmpty(t, rule.Annotations["description"], rule.Alert)
			byName[rule.Alert] = struct{ expr, severity string }{rule.Expr, rule.Labels["severity"]}
		}
	}
	for _, tc := range []struct {
		alert, exprPart, severity string
	}{
		{"DelayQueueDepthHigh", "rabbitmq_delay_queue_depth) > 50000", "warning"},
		{"DelayQueueDepthCritical", "rabbitmq_delay_queue_depth) > 100000", "critical"},
		{"DelayQueueOverflow", "rabbitmq_delay_queue_overflow_total[5m])) > 0", "critical"},
		{"DelayAccuracyDegraded", "histogram_quantile(0.95, sum by (le) (rate(rabbitmq_delay_accuracy_seconds_bucket[10m]))) > 10", "warning"},
		{"DeadLetterQueueGrowing", "msgpulse_deadlettered_total[15m]", "warning"},
		{"SMSPumpingSuspected", "max(msgpulse_fraud_blocked_prefixes) > 0", "warning"},
		{"MailComplaintRateHigh", `/ scalar(sum(increase(msgpulse_sent_total{channel="mail"}[24h])) >= 1000) > 0.003`, "critical"},
		{"MailBounceRateHigh", `/ scalar(sum(increase(msgpulse_sent_total{channel="mail"}[24h])) >= 1000) > 0.05`, "warning"},
	} {
		got, ok := byName[tc.alert]
		require.True(t, ok, "missing alert %s", tc.alert)
		require.Contains(t, got.expr, tc.exprPart, tc.alert)
		require.Equal(t, tc.severity, got.severity, tc.alert)
	}
}

// pendingMetrics are metrics alerts read that no code registers yet (a
// branch of the same issue will): none today.
var pendingMetrics = map[string]string{}

var metricName = regexp.MustCompile(`\b(msgpulse_[a-z_]+|rabbitmq_delay_[a-z_]+|rabbitmq_publish_delayed_total)\b`)

// Every msgpulse metric an alert reads is one the code registers, so a
// rename cannot silently disable an alert.
func TestAlertsReadRegisteredMetrics(t *testing.T) {
	t.Parallel()
	known := map[string]bool{}
	ch := make(chan *prometheus.Desc, 100)
	go func() {
		delay.NewMetrics(nil).Describe(ch)
		dispatch.NewMetrics(nil).Describe(ch)
		fraud.NewMetrics(nil, nil).Describe(ch)
		applier.NewMetrics(nil).Receipts.Describe(ch)
		close(ch)
	}()
	for d := range ch {
		if m := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String()); m != nil {
			known[m[1]] = true
		}
	}
	for name := range pendingMetrics {
		known[name] = true
	}
	for _, g := range load(t).Groups {
		for _, rule := range g.Rules {
			for _, name := range metricName.FindAllString(rule.Expr, -1) {
				name = regexp.MustCompile(`_(bucket|sum|count)$`).ReplaceAllString(name, "")
				require.True(t, known[name], "alert %s reads %s, which no msgpulse code registers", rule.Alert, name)
			}
		}
	}
}
