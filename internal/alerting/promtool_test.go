package alerting

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// promtool finds Debian's promtool (package prometheus), which
// scripts/services.sh installs for `make test`.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed: `make services` (scripts/services.sh) installs Debian's prometheus package, which has it")
	}
	return p
}

func deploy(parts ...string) string {
	return filepath.Join(append([]string{"..", "..", "deploy"}, parts...)...)
}

// promtool checks the rules and runs their unit tests
// (deploy/prometheus/alerts_test.yml), and every alert has a test.
func TestPromtoolRules(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(bin, args...) //nolint:gosec // promtool with fixed arguments
		cmd.Dir = deploy("prometheus")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool %v:\n%s", args, out)
	}
	data, err := os.ReadFile(deploy("prometheus", "alerts_test.yml"))
	require.NoError(t, err)
	var tests struct {
		Tests []struct {
			Name  string `yaml:"name"`
			Cases []struct {
				Alert string `yaml:"alertname"`
				Exp   []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	require.NoError(t, yaml.Unmarshal(data, &tests))
	fires := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, c := range tc.Cases {
			if len(c.Exp) > 0 {
				fires[c.Alert] = true
			}
		}
	}
	var missing []string
	for _, g := range load(t).Groups {
		for _, r := range g.Rules {
			if !fires[r.Alert] {
				missing = append(missing, r.Alert)
			}
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "alerts without a promtool test that makes them fire")
}
