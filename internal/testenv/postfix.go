package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Postfix is a Postfix instance of one test's own (scripts/postfix.sh):
// its own directories and SMTP port on 127.0.0.1; any RCPT at Domain is
// taken and local delivery to an unknown user bounces 5.1.1 with
// Postfix's own DSN, which goes to the bounce receiver its routes name.
type Postfix struct {
	Port   int
	Domain string
	Base   string
}

var (
	postfixInstall     sync.Once
	postfixInstallSkip string
)

// StartPostfix installs Debian's postfix if absent (make test does it
// first), starts an instance on port for domain, routing each bounce
// domain of routes to its receiver ("host:port"), and stops it when the
// test ends, printing its log's tail if the test failed. The test is
// skipped, saying why, only when the package cannot be installed.
func StartPostfix(t testing.TB, port int, domain string, routes map[string]string) *Postfix {
	t.Helper()
	p := &Postfix{Port: port, Domain: domain, Base: filepath.Join(os.TempDir(), "msgpulse-postfix-"+strconv.Itoa(port))}
	var rs []string
	for d, addr := range routes {
		rs = append(rs, d+"="+addr)
	}
	sort.Strings(rs)
	env := append(os.Environ(), "POSTFIX_PORT="+strconv.Itoa(port), "POSTFIX_BASE="+p.Base,
		"POSTFIX_DOMAIN="+domain, "POSTFIX_BOUNCE_ROUTES="+strings.Join(rs, ","))
	run := func(arg string) ([]byte, error) {
		cmd := exec.CommandContext(context.Background(), postfixScript(), arg) //nolint:gosec // the project's own script, with an argument of this file's
		cmd.Env = env
		return cmd.CombinedOutput()
	}
	postfixInstall.Do(func() {
		if out, err := run("install"); err != nil {
			postfixInstallSkip = "postfix cannot be installed (scripts/postfix.sh install: " + err.Error() + "): " + string(out)
		}
	})
	if postfixInstallSkip != "" {
		t.Skip(postfixInstallSkip)
	}
	if out, err := run("start"); err != nil {
		t.Fatalf("scripts/postfix.sh start: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(p.Base, "maillog"))
			lines := strings.Split(string(b), "\n")
			t.Logf("Postfix's log, the last lines:\n%s", strings.Join(lines[max(0, len(lines)-60):], "\n"))
		}
		if out, err := run("stop"); err != nil {
			t.Logf("scripts/postfix.sh stop: %v: %s", err, out)
		}
	})
	return p
}

// postfixScript is scripts/postfix.sh, found from this file's place in the
// repository, whichever package's test runs it.
func postfixScript() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "scripts", "postfix.sh")
}
