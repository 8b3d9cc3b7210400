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
	// No sampling: every failure line matters more than log volume here.
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), zap.NewAtomicLevelAt(lvl))
	return zap.New(Redacting(core), opts...), nil
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
