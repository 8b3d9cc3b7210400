// Package logging builds the zap logger every program uses, from LOG_LEVEL
// and LOG_FORMAT, and holds the one function that masks recipients.
//
// A log line must never carry a verification code, a secret or a full
// recipient address: use Mask for recipients and never log message bodies.
package logging

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/msgpulse/msgpulse/internal/redact"
)

// New returns a logger at level (debug|info|warn|error) in format
// (json|console), writing to stderr.
func New(level, format string) (*zap.Logger, error) { return NewTo(os.Stderr, level, format) }

// NewTo is New writing to w.
func NewTo(w io.Writer, level, format string) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	var enc zapcore.Encoder
	opts := []zap.Option{zap.AddCaller(), zap.ErrorOutput(zapcore.Lock(os.Stderr)),
		// Stack traces only for errors: a warning (a retry, a pause) is an
		// expected event, not a bug to locate.
		zap.AddStacktrace(zapcore.ErrorLevel)}
	switch format {
	case "json":
		ec := zap.NewProductionEncoderConfig()
		ec.TimeKey = "ts"
		ec.EncodeTime = zapcore.ISO8601TimeEncoder
		enc = zapcore.NewJSONEncoder(ec)
	case "console":
		ec := zap.NewDevelopmentEncoderConfig()
		ec.EncodeLevel = zapcore.CapitalColorLevelEncoder
		enc = zapcore.NewConsoleEncoder(ec)
		opts = append(opts, zap.Development())
	default:
		return nil, fmt.Errorf("log format %q: want json or console", format)
	}
	// No sampling: every failure line matters more than log volume here;
	// floods are bounded where they arise (Throttle).
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), zap.NewAtomicLevelAt(lvl))
	return zap.New(Redacting(Unique(core)), opts...), nil
}

// reservedKeys are the keys New's encoders write on every line.
var reservedKeys = []string{"ts", "level", "logger", "caller", "msg", "stacktrace", "function"}

// Unique wraps a core so that no line it writes has a key twice: a field
// whose key the line already has (from the encoder, a logger's With, or
// an earlier field) is written as key_2 (key_3, …). Elasticsearch refuses
// a document with a duplicate field, and most other pipelines keep one of
// the two values (issue 38: the API's request lines had "caller" twice,
// zap's and the API key's). The code is meant never to need it, and tests
// look for both (logging's TestNoFieldKeyIsWrittenTwice, e2e's
// TestEveryLogLineHasEachKeyOnce); this keeps a line a path no test took
// from being lost. It costs a comparison of each field's key with the
// line's others.
func Unique(c zapcore.Core) zapcore.Core { return uniqueCore{Core: c} }

type uniqueCore struct {
	zapcore.Core
	with []string // the keys With gave, in order
}

func (u uniqueCore) With(fields []zapcore.Field) zapcore.Core {
	fields = unique(fields, u.with)
	with := slices.Clip(u.with)
	for _, f := range fields {
		if f.Type == zapcore.NamespaceType {
			break
		}
		with = append(with, f.Key)
	}
	return uniqueCore{Core: u.Core.With(fields), with: with}
}

func (u uniqueCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if u.Enabled(e.Level) {
		return ce.AddCore(e, u)
	}
	return ce
}

func (u uniqueCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	return u.Core.Write(e, unique(fields, u.with))
}

// unique renames the fields whose key is reserved, in with, or used by an
// earlier field; it copies fields only when it renames one. A namespace
// ends the check: the keys after it are in an object of their own.
func unique(fields []zapcore.Field, with []string) []zapcore.Field {
	taken := func(k string, upto int, fs []zapcore.Field) bool {
		if slices.Contains(reservedKeys, k) || slices.Contains(with, k) {
			return true
		}
		for _, f := range fs[:upto] {
			if f.Key == k && f.Type != zapcore.SkipType {
				return true
			}
		}
		return false
	}
	out := fields
	for i, f := range fields {
		if f.Type == zapcore.NamespaceType {
			break
		}
		if f.Type == zapcore.SkipType || f.Key == "" || !taken(f.Key, i, out) {
			continue
		}
		if &out[0] == &fields[0] {
			out = slices.Clone(fields)
		}
		for n := 2; ; n++ {
			if k := f.Key + "_" + strconv.Itoa(n); !taken(k, len(out), out) {
				out[i].Key = k
				break
			}
		}
	}
	return out
}

// Redacting wraps a core so that no line it writes carries a secret
// (redact.Text: the password or query string of a URL, as in a broker,
// Redis or vendor URL quoted by an error, a token, key or signature
// parameter, an Authorization header), whichever package logged it:
// messages, string fields, errors and Stringers pass through redact.Text.
// It costs a scan of each such field for the few characters a secret
// needs.
func Redacting(c zapcore.Core) zapcore.Core { return redactCore{c} }

type redactCore struct{ zapcore.Core }

func (r redactCore) With(fields []zapcore.Field) zapcore.Core {
	return redactCore{r.Core.With(redactFields(fields))}
}

func (r redactCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if r.Enabled(e.Level) {
		return ce.AddCore(e, r)
	}
	return ce
}

func (r redactCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	e.Message = redact.Text(e.Message)
	return r.Core.Write(e, redactFields(fields))
}

func redactFields(fields []zapcore.Field) []zapcore.Field {
	var out []zapcore.Field
	for i, f := range fields {
		var text string
		switch f.Type {
		case zapcore.StringType:
			text = f.String
		case zapcore.ErrorType:
			if err, ok := f.Interface.(error); ok && err != nil {
				text = err.Error()
			}
		case zapcore.StringerType:
			if st, ok := f.Interface.(fmt.Stringer); ok && st != nil {
				text = st.String()
			}
		default:
			continue
		}
		red := redact.Text(text)
		if red == text {
			continue
		}
		if out == nil {
			out = append([]zapcore.Field(nil), fields...)
		}
		out[i] = zap.String(f.Key, red)
	}
	if out == nil {
		return fields
	}
	return out
}

// Mask hides most of a recipient: "alice@example.com" -> "a***e@example.com",
// "+8613900001234" -> "+86*******1234".
func Mask(recipient string) string {
	if at := strings.LastIndexByte(recipient, '@'); at > 0 {
		local, domain := recipient[:at], recipient[at:]
		if len(local) <= 2 {
			return strings.Repeat("*", len(local)) + domain
		}
		return local[:1] + "***" + local[len(local)-1:] + domain
	}
	if n := len(recipient); n > 7 {
		return recipient[:3] + strings.Repeat("*", n-7) + recipient[n-4:]
	}
	return strings.Repeat("*", len(recipient))
}
