package config

import (
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/provider/mail"
)

// smtpVars names the variable behind each mail.Config field, so an error
// from mail.Config.Validate tells the operator what to change.
var smtpVars = map[string]string{
	"Host":     "SMTP_HOST",
	"Port":     "SMTP_PORT",
	"Username": "SMTP_USERNAME",
	"Password": "SMTP_PASSWORD",
	"TLS":      "SMTP_TLS",
	"From":     "MAIL_FROM",
	"HeloName": "SMTP_HELO_NAME",
	"Timeout":  "SMTP_TIMEOUT",
	"PoolSize": "SMTP_POOL_SIZE",
}

// loadSMTP reads the SMTP provider's settings. The defaults point at the
// local mail catcher (make run), so a newcomer's first email lands there.
func loadSMTP(l *envconf.Loader) mail.Config {
	c := mail.DefaultConfig()
	c.Host = l.String("SMTP_HOST", c.Host, "SMTP server host name or IP (the default is the local mail catcher)")
	c.Port = l.Int("SMTP_PORT", c.Port, 1, 65535, "SMTP server port (1025: local mail catcher; usually 587 with starttls, 465 with tls)")
	c.Username = l.String("SMTP_USERNAME", "", "SMTP AUTH (PLAIN) user name; empty: no AUTH")
	c.Password = l.Secret("SMTP_PASSWORD", "", "SMTP AUTH password; sent only over TLS or to localhost")
	c.TLS = mail.TLSMode(l.Enum("SMTP_TLS", string(c.TLS),
		[]string{string(mail.TLSNone), string(mail.TLSStartTLS), string(mail.TLSImplicit)},
		"none: plain text (local servers only); starttls: upgrade, refusing servers without it; tls: TLS from the start"))
	c.From = l.String("MAIL_FROM", c.From, `sender of every email, "Name <address>"; its domain ends every Message-ID`)
	c.HeloName = l.String("SMTP_HELO_NAME", "", "name sent in EHLO (empty: this host's name)")
	c.Timeout = l.Duration("SMTP_TIMEOUT", c.Timeout, 100*time.Millisecond, 5*time.Minute, "limit for connecting (with TLS and AUTH) and for each SMTP command")
	c.PoolSize = l.Int("SMTP_POOL_SIZE", c.PoolSize, 1, 1000, "SMTP connections kept open for reuse; also the most open at once")
	c.Pipelining = l.Bool("SMTP_PIPELINING", c.Pipelining, "send MAIL FROM, RCPT TO and DATA in one write when the server offers PIPELINING (RFC 2920): 2 round trips per message instead of 4")
	c.Chunking = l.Bool("SMTP_CHUNKING", c.Chunking, "with SMTP_PIPELINING, send the message as BDAT in the same write as MAIL FROM and RCPT TO when the server offers CHUNKING (RFC 3030): 1 round trip per message instead of 2")
	if err := c.Validate(); err != nil {
		name := "SMTP_HOST"
		var fe *mail.FieldError
		if errors.As(err, &fe) && smtpVars[fe.Field] != "" {
			name = smtpVars[fe.Field]
			err = errors.New(fe.Msg)
		}
		// No value in the message: it may be the password.
		l.Fail(name, "", "%v", err)
	}
	return c
}

// loadDKIMKey reads DKIM_PRIVATE_KEY_FILE when DKIM is on (config/receipt.go
// read the three names), so a key that cannot be read or cannot sign
// DKIM stops the consumer at start instead of failing every mail.
func loadDKIMKey(l *envconf.Loader, r Receipts) *mail.DKIM {
	if r.DKIMDomain == "" || r.DKIMSelector == "" || r.DKIMKeyFile == "" {
		return nil
	}
	key, err := mail.LoadDKIMKey(r.DKIMKeyFile)
	if err != nil {
		l.Fail("DKIM_PRIVATE_KEY_FILE", r.DKIMKeyFile, "%v", err)
		return nil
	}
	d := &mail.DKIM{Domain: r.DKIMDomain, Selector: r.DKIMSelector, Key: key}
	if err := d.Validate(); err != nil {
		l.Fail("DKIM_DOMAIN", r.DKIMDomain, "%v", err)
		return nil
	}
	return d
}

// Mailcatcher configures cmd/mailcatcher, the local SMTP server that
// stands in for the recipients' inboxes.
type Mailcatcher struct {
	SMTPAddr  string
	HTTPAddr  string
	Max       int
	Username  string // non-empty: AUTH PLAIN required
	Password  string
	LogLevel  string
	LogFormat string
}

// LogSettings returns LOG_LEVEL and LOG_FORMAT.
func (c Mailcatcher) LogSettings() (level, format string) { return c.LogLevel, c.LogFormat }

// LoadMailcatcher reads cmd/mailcatcher's settings; check l.Err().
func LoadMailcatcher(lookup func(string) (string, bool)) (Mailcatcher, *envconf.Loader) {
	l := envconf.New(lookup)
	c := Mailcatcher{
		SMTPAddr: hostPort(l, "MAILCATCHER_SMTP_ADDR", "127.0.0.1:1025", "address the SMTP server listens on (SMTP_HOST/SMTP_PORT's default)"),
		HTTPAddr: hostPort(l, "MAILCATCHER_HTTP_ADDR", "127.0.0.1:8025", "address of the web page listing received mail"),
		Max:      l.Int("MAILCATCHER_MAX", 1000, 1, 1_000_000, "messages kept in memory; the oldest are dropped first"),
		Username: l.String("MAILCATCHER_SMTP_USERNAME", "", "require AUTH PLAIN with this user name (empty: no AUTH), to try SMTP_USERNAME locally"),
		Password: l.Secret("MAILCATCHER_SMTP_PASSWORD", "", "password for MAILCATCHER_SMTP_USERNAME"),
		LogLevel: l.Enum("LOG_LEVEL", "info", []string{"debug", "info", "warn", "error"}, "log level"),
		// A development tool: readable logs by default.
		LogFormat: l.Enum("LOG_FORMAT", "console", []string{"json", "console"}, "log format"),
	}
	switch {
	case c.Username != "" && c.Password == "":
		l.Fail("MAILCATCHER_SMTP_PASSWORD", "", "must be set when MAILCATCHER_SMTP_USERNAME is")
	case c.Username == "" && c.Password != "":
		l.Fail("MAILCATCHER_SMTP_USERNAME", "", "must be set when MAILCATCHER_SMTP_PASSWORD is")
	}
	return c, l
}

// hostPort reads a listen address; port 0 (pick a free one) is allowed.
func hostPort(l *envconf.Loader, name, def, help string) string {
	v := l.String(name, def, help+" (host:port)")
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		l.Fail(name, v, "not host:port (e.g. 127.0.0.1:1025)")
		return v
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		l.Fail(name, v, "port must be a number between 0 and 65535")
	}
	return v
}
