package config

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// `make docs` must write the same file on every run: each run starts the
// programs anew (another pid, maybe another host), so a default computed at
// run time that leaked into -h would make a diff every time.
func TestCommandDocsAreTheSameRunToRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every command")
	}
	dir := t.TempDir()
	gen := func(name string) string {
		out := filepath.Join(dir, name)
		cmd := exec.Command("bash", root("scripts", "docs.sh"), out)
		cmd.Env = append(os.Environ(), "DOCS_BIN="+filepath.Join(dir, "bin"))
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", b)
		data, err := os.ReadFile(out)
		require.NoError(t, err)
		return string(data)
	}
	first, second := gen("a.md"), gen("b.md")
	require.Equal(t, first, second, "two runs of scripts/docs.sh differ")
	host, _ := os.Hostname()
	require.Contains(t, first, "hostname-pid", "CONSUMER_ID shows the default's form")
	if host != "" {
		require.NotContains(t, first, host+"-", "the host name leaked into the docs")
	}
}
