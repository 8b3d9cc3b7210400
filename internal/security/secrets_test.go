package security

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/envconf"
)

// flagMethods are the flag package's definers, with the index of the
// flag's name among their arguments.
var flagMethods = map[string]int{
	"Bool": 0, "BoolVar": 1, "BoolFunc": 0, "Duration": 0, "DurationVar": 1, "Float64": 0, "Float64Var": 1,
	"Func": 0, "Int": 0, "IntVar": 1, "Int64": 0, "Int64Var": 1, "String": 0, "StringVar": 1, "TextVar": 1,
	"Uint": 0, "UintVar": 1, "Uint64": 0, "Uint64Var": 1, "Var": 1,
}

// commandFlags finds every command-line flag the Go files under root
// define: calls of the flag package's definers on the package itself, on a
// variable assigned from flag.NewFlagSet, or on a parameter, variable or
// field of type *flag.FlagSet, in files that import "flag". A name built
// at run time (prefix+"rate") is reported with * for the unknown parts.
func commandFlags(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{} // flag name -> file:line
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkgName := ""
		for _, imp := range f.Imports {
			if imp.Path.Value == `"flag"` {
				pkgName = "flag"
				if imp.Name != nil {
					pkgName = imp.Name.Name
				}
			}
		}
		if pkgName == "" {
			return nil
		}
		isFlagSet := func(e ast.Expr) bool {
			star, ok := e.(*ast.StarExpr)
			if !ok {
				return false
			}
			sel, ok := star.X.(*ast.SelectorExpr)
			if !ok {
				return false
			}
			x, ok := sel.X.(*ast.Ident)
			return ok && x.Name == pkgName && sel.Sel.Name == "FlagSet"
		}
		// Names that hold a flag set anywhere in the file (no scoping: a
		// name that is a flag set somewhere is checked everywhere).
		sets := map[string]bool{pkgName: true}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.Field:
				if isFlagSet(n.Type) {
					for _, id := range n.Names {
						sets[id.Name] = true
					}
				}
			case *ast.ValueSpec:
				if n.Type != nil && isFlagSet(n.Type) {
					for _, id := range n.Names {
						sets[id.Name] = true
					}
				}
			case *ast.AssignStmt:
				for i, rhs := range n.Rhs {
					call, ok := rhs.(*ast.CallExpr)
					if !ok || i >= len(n.Lhs) {
						continue
					}
					if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "NewFlagSet" {
						if id, ok := n.Lhs[i].(*ast.Ident); ok {
							sets[id.Name] = true
						}
					}
				}
			}
			return true
		})
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			idx, known := flagMethods[sel.Sel.Name]
			if !known || len(call.Args) <= idx {
				return true
			}
			recv := ""
			switch x := sel.X.(type) {
			case *ast.Ident:
				recv = x.Name
			case *ast.SelectorExpr: // c.fs.String(...)
				recv = x.Sel.Name
			}
			if !sets[recv] {
				return true
			}
			out[flagName(call.Args[idx])] = fset.Position(call.Pos()).String()
			return true
		})
		return nil
	})
	require.NoError(t, err)
	return out
}

// flagName is the string a flag's name expression builds, with * for each
// part only known at run time.
func flagName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.BasicLit:
		if s, err := strconv.Unquote(e.Value); err == nil {
			return s
		}
	case *ast.BinaryExpr:
		if e.Op == token.ADD {
			return flagName(e.X) + flagName(e.Y)
		}
	case *ast.ParenExpr:
		return flagName(e.X)
	}
	return "*"
}

// The scanner finds flags wherever the programs define them: on the flag
// package, on a new flag set, on one passed as a parameter or held in a
// field, with names built at run time.
func TestFlagScannerFindsEveryForm(t *testing.T) {
	t.Parallel()
	flags := commandFlags(t, filepath.Join("testdata", "flags"))
	for _, name := range []string{"global", "local", "param-api-key", "field", "*token", "prefix-rate"} {
		require.Contains(t, flags, name)
	}
}

// Secrets come only from the environment: no command-line flag of any
// msgpulse program takes one (a flag shows in ps, in shell history and in
// process listings of every user on the host). The scan must find the
// flags that exist, or it proves nothing.
func TestNoSecretIsACommandLineFlag(t *testing.T) {
	t.Parallel()
	flags := commandFlags(t, filepath.Join("..", ".."))
	for _, known := range []string{"channel", "reveal", "export", "dev-user", "rate"} {
		require.Contains(t, flags, known, "control: the scan finds the flag -%s", known)
	}
	secretish := regexp.MustCompile(`(?i)secret|passw|token|api.?key|credential|private|auth|sign`)
	// -dev-user writes the local development broker's guest user into
	// rabbitmq/definitions.json (make definitions); it is no msgpulse secret
	// and production exports leave it out.
	allowed := []string{"dev-user"}
	for name, where := range flags {
		if slices.Contains(allowed, name) {
			continue
		}
		require.NotRegexp(t, secretish, name, "flag -%s (%s) looks like it takes a secret: read it from the environment", name, where)
	}
}

// The secrets are declared as secrets, so -h prints "(set)" for a default
// and never a value, and the programs that read them take no argument at
// all (cli refuses any; see internal/cli).
func TestSecretsAreDeclaredSecretAndNeverPrinted(t *testing.T) {
	t.Parallel()
	const value = "s3cr3t-value-that-must-not-print-0123456789abcdefgh"
	env := map[string]string{
		"CODE_SECRET": value, "CALLBACK_SECRET": value, "SMTP_PASSWORD": value, "SMTP_USERNAME": "u", "SMTP_TLS": "starttls",
		"SMS_WEBHOOK_SECRET": value, "ALIYUN_ACCESS_KEY_SECRET": value, "TENCENT_SECRET_KEY": value, "TWILIO_AUTH_TOKEN": value,
		"WECOM_CORP_SECRET": value, "WECOM_ROBOTS": "ops=" + value,
		"API_KEYS": "caller:" + value, "MAILCATCHER_SMTP_PASSWORD": value, "MAILCATCHER_SMTP_USERNAME": "u",
		"AMQP_URL": "amqps://user:" + value + "@rabbit.example.com:5671/", "REDIS_URL": "rediss://:" + value + "@redis.example.com:6380/0",
		"RABBITMQ_MANAGEMENT_URL": "https://user:" + value + "@rabbit.example.com:15671",
	}
	type loader func(func(string) (string, bool)) *envconf.Loader
	for name, load := range map[string]loader{
		"api":         func(l func(string) (string, bool)) *envconf.Loader { _, e := config.LoadAPI(l); return e },
		"consumer":    func(l func(string) (string, bool)) *envconf.Loader { _, e := config.LoadConsumer(l); return e },
		"dlq":         func(l func(string) (string, bool)) *envconf.Loader { _, e := config.LoadDLQ(l); return e },
		"topology":    func(l func(string) (string, bool)) *envconf.Loader { _, e := config.LoadTopology(l); return e },
		"mailcatcher": func(l func(string) (string, bool)) *envconf.Loader { _, e := config.LoadMailcatcher(l); return e },
	} {
		l := load(envconf.FromMap(env))
		var usage strings.Builder
		l.Usage(&usage)
		require.NotContains(t, usage.String(), value, "%s -h", name)
		if err := l.Errs(); err != nil {
			require.NotContains(t, err.Error(), value, "%s: a configuration error", name)
		}
		for _, v := range l.Vars() {
			// TENCENT_SECRET_ID is an identifier, like ALIYUN_ACCESS_KEY_ID.
			isSecret := regexp.MustCompile(`SECRET|PASSWORD|TOKEN`).MatchString(v.Name) && !strings.HasSuffix(v.Name, "_ID")
			if isSecret {
				require.True(t, v.Secret, "%s: %s is not declared with Loader.Secret", name, v.Name)
			}
		}
	}
	// A bad value in a secret never echoes it.
	_, l := config.LoadAPI(envconf.FromMap(map[string]string{"CODE_SECRET": "short-" + "xyz", "API_KEYS": "k:short"}))
	require.Error(t, l.Errs())
	require.NotContains(t, l.Errs().Error(), "short-xyz")
	require.NotContains(t, l.Errs().Error(), "k:short")
}
