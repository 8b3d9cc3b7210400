package envconf

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/msgpulse/msgpulse/internal/redact"
)

// Var documents one environment variable.
type Var struct {
	Name    string
	Default string
	Help    string
	Secret  bool
}

// Error is a bad value of one variable.
type Error struct {
	Name  string
	Value string
	Msg   string
}

// Error quotes the value with the password of any URL in it, or in the
// message, masked: whichever getter or check produced it.
func (e *Error) Error() string {
	if e.Value == "" {
		return redact.Passwords(fmt.Sprintf("%s: %s", e.Name, e.Msg))
	}
	return redact.Passwords(fmt.Sprintf("%s=%q: %s", e.Name, e.Value, e.Msg))
}

// Loader collects values and errors; check Err once after all getters ran.
type Loader struct {
	lookup func(string) (string, bool)
	vars   []Var
	seen   map[string]bool
	errs   []error
}

// New returns a Loader reading from lookup; nil means os.LookupEnv.
func New(lookup func(string) (string, bool)) *Loader {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	return &Loader{lookup: lookup, seen: map[string]bool{}}
}

// FromMap is a lookup over a map, for tests.
func FromMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func (l *Loader) doc(v Var) {
	if l.seen[v.Name] {
		return
	}
	l.seen[v.Name] = true
	l.vars = append(l.vars, v)
}

func (l *Loader) raw(name, def string) (string, bool) {
	v, ok := l.lookup(name)
	v = strings.TrimSpace(v)
	if !ok || v == "" {
		return def, false
	}
	return v, true
}

// Fail records an error for name, for checks that span several variables.
func (l *Loader) Fail(name, value, format string, args ...any) {
	l.errs = append(l.errs, &Error{Name: name, Value: value, Msg: fmt.Sprintf(format, args...)})
}

// Err returns the first error, or nil. One line is all an operator needs to
// fix the first problem; the rest show up on the next run.
func (l *Loader) Err() error {
	if len(l.errs) == 0 {
		return nil
	}
	return l.errs[0]
}

// Errs returns every error collected.
func (l *Loader) Errs() error { return errors.Join(l.errs...) }

// String reads a string.
func (l *Loader) String(name, def, help string) string {
	l.doc(Var{Name: name, Default: def, Help: help})
	v, _ := l.raw(name, def)
	return v
}

// Computed reads a string whose default is worked out at run time (a host
// name, a pid). -h shows shown, the default's form, instead: the generated
// docs/commands.md must be the same on every machine and every run, and a
// real value there would be a diff each time someone runs `make docs`.
func (l *Loader) Computed(name, def, shown, help string) string {
	l.doc(Var{Name: name, Default: shown, Help: help})
	v, _ := l.raw(name, def)
	return v
}

// Secret reads a string that must never be printed, not even its default.
func (l *Loader) Secret(name, def, help string) string {
	l.doc(Var{Name: name, Default: def, Help: help, Secret: true})
	v, _ := l.raw(name, def)
	return v
}

// Int reads an integer in [lo, hi].
func (l *Loader) Int(name string, def, lo, hi int, help string) int {
	l.doc(Var{Name: name, Default: strconv.Itoa(def), Help: help})
	s, set := l.raw(name, "")
	if !set {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		l.Fail(name, s, "not an integer")
		return def
	}
	if n < lo || n > hi {
		l.Fail(name, s, "must be between %d and %d", lo, hi)
		return def
	}
	return n
}

// Float reads a decimal number in [lo, hi].
func (l *Loader) Float(name string, def, lo, hi float64, help string) float64 {
	l.doc(Var{Name: name, Default: strconv.FormatFloat(def, 'g', -1, 64), Help: help})
	s, set := l.raw(name, "")
	if !set {
		return def
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		l.Fail(name, s, "not a number")
		return def
	}
	if f < lo || f > hi {
		l.Fail(name, s, "must be between %g and %g", lo, hi)
		return def
	}
	return f
}

// Duration reads a Go duration (e.g. 60s, 5m, 1h30m) in [lo, hi].
func (l *Loader) Duration(name string, def, lo, hi time.Duration, help string) time.Duration {
	l.doc(Var{Name: name, Default: FormatDuration(def), Help: help})
	s, set := l.raw(name, "")
	if !set {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		l.Fail(name, s, "not a duration (use e.g. 500ms, 60s, 5m, 1h)")
		return def
	}
	if d < lo || d > hi {
		l.Fail(name, s, "must be between %s and %s", FormatDuration(lo), FormatDuration(hi))
		return def
	}
	return d
}

// Durations reads a comma-separated list of durations, each in [lo, hi].
func (l *Loader) Durations(name string, def []time.Duration, lo, hi time.Duration, help string) []time.Duration {
	parts := make([]string, len(def))
	for i, d := range def {
		parts[i] = FormatDuration(d)
	}
	l.doc(Var{Name: name, Default: strings.Join(parts, ","), Help: help})
	s, set := l.raw(name, "")
	if !set {
		return append([]time.Duration(nil), def...)
	}
	var out []time.Duration
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		d, err := time.ParseDuration(p)
		if err != nil {
			l.Fail(name, s, "%q is not a duration (use e.g. 5s,30s,5m)", p)
			return append([]time.Duration(nil), def...)
		}
		if d < lo || d > hi {
			l.Fail(name, s, "%s must be between %s and %s", p, FormatDuration(lo), FormatDuration(hi))
			return append([]time.Duration(nil), def...)
		}
		out = append(out, d)
	}
	return out
}

// Bool reads true/false (also 1/0, on/off, yes/no).
func (l *Loader) Bool(name string, def bool, help string) bool {
	l.doc(Var{Name: name, Default: strconv.FormatBool(def), Help: help})
	s, set := l.raw(name, "")
	if !set {
		return def
	}
	switch strings.ToLower(s) {
	case "1", "true", "on", "yes":
		return true
	case "0", "false", "off", "no":
		return false
	}
	l.Fail(name, s, "must be true or false")
	return def
}

// Enum reads one of allowed (case-insensitive); the result is lower case.
func (l *Loader) Enum(name, def string, allowed []string, help string) string {
	l.doc(Var{Name: name, Default: def, Help: help + " (" + strings.Join(allowed, "|") + ")"})
	s, set := l.raw(name, "")
	if !set {
		return def
	}
	for _, a := range allowed {
		if strings.EqualFold(s, a) {
			return a
		}
	}
	l.Fail(name, s, "must be one of %s", strings.Join(allowed, ", "))
	return def
}

// Pair is one "key=value" item of a list setting, as written (Item) and
// split and trimmed (Key, Value).
type Pair struct{ Item, Key, Value string }

// Pairs splits "k=v<sep>k=v", dropping empty items. It refuses an item
// without a key or a value (want shows the expected form) and a key given
// twice (noun says what a key is: "template", "robot").
func Pairs(s, sep, noun, want string) ([]Pair, error) {
	var out []Pair
	seen := map[string]bool{}
	for item := range strings.SplitSeq(s, sep) {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("%q: want %s", item, want)
		}
		if seen[k] {
			return nil, fmt.Errorf("%s %q mapped twice", noun, k)
		}
		seen[k] = true
		out = append(out, Pair{item, k, v})
	}
	return out, nil
}

// List reads a comma-separated list; empty items are dropped.
func (l *Loader) List(name, def, help string) []string {
	l.doc(Var{Name: name, Default: def, Help: help})
	s, _ := l.raw(name, def)
	return SplitURLs(s)
}

// URL reads an absolute URL whose scheme is one of schemes.
func (l *Loader) URL(name, def string, schemes []string, help string) string {
	l.doc(Var{Name: name, Default: redact.Passwords(def), Help: help})
	s, _ := l.raw(name, def)
	if s != "" {
		l.checkURL(name, s, s, schemes)
	}
	return s
}

// URLs reads a comma-separated list of absolute URLs (one per node of a
// cluster), each with one of schemes, and returns it as written.
func (l *Loader) URLs(name, def string, schemes []string, help string) string {
	l.doc(Var{Name: name, Default: redact.Passwords(def), Help: help})
	s, _ := l.raw(name, def)
	for _, p := range SplitURLs(s) {
		if !l.checkURL(name, s, p, schemes) {
			break
		}
	}
	return s
}

func (l *Loader) checkURL(name, whole, s string, schemes []string) bool {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		l.Fail(name, redact.Passwords(whole), "not an absolute URL")
		return false
	}
	for _, sc := range schemes {
		if u.Scheme == sc {
			return true
		}
	}
	l.Fail(name, redact.Passwords(whole), "scheme must be one of %s", strings.Join(schemes, ", "))
	return false
}

// Vars returns the documented variables in declaration order.
func (l *Loader) Vars() []Var { return append([]Var(nil), l.vars...) }

// Usage writes the documented variables as an aligned table.
func (l *Loader) Usage(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  VARIABLE\tDEFAULT\tMEANING")
	for _, v := range l.vars {
		def := v.Default
		if v.Secret && def != "" {
			def = "(set)"
		}
		if def == "" {
			def = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", v.Name, def, v.Help)
	}
	_ = tw.Flush()
}

// Names returns the documented variable names, sorted.
func (l *Loader) Names() []string {
	out := make([]string, 0, len(l.vars))
	for _, v := range l.vars {
		out = append(out, v.Name)
	}
	sort.Strings(out)
	return out
}

// FormatDuration prints d the way an operator would type it (60s, 5m, 24h).
func FormatDuration(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	switch {
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	case d%time.Millisecond == 0:
		return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
	}
	return d.String()
}

// SplitURLs splits a comma-separated list (of URLs, one per node of a
// cluster, or any list setting), trimming items and dropping empty ones.
func SplitURLs(list string) []string {
	var out []string
	for _, u := range strings.Split(list, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// WithVHost returns the list of AMQP URLs with every URL's vhost (its path)
// replaced by vhost.
func WithVHost(list, vhost string) (string, error) {
	urls := SplitURLs(list)
	for i, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			return "", fmt.Errorf("URL %s: not a URL", redact.Passwords(raw))
		}
		u.Path, u.RawPath = "/"+vhost, "/"+url.PathEscape(vhost)
		urls[i] = u.String()
	}
	return strings.Join(urls, ","), nil
}
