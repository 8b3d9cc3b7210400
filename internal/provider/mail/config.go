package mail

import (
	"crypto/tls"
	"fmt"
	netmail "net/mail"
	"strings"
	"time"
)

// TLSMode is how the connection to the SMTP server is protected.
type TLSMode string

// TLS modes.
const (
	// TLSNone: plain text. Only sensible for a server on the same host (the
	// local mail catcher, a sidecar relay).
	TLSNone TLSMode = "none"
	// TLSStartTLS: connect in plain text, then upgrade with STARTTLS; a
	// server that does not offer STARTTLS is an error, never a silent
	// downgrade (port 587).
	TLSStartTLS TLSMode = "starttls"
	// TLSImplicit: TLS from the first byte (port 465).
	TLSImplicit TLSMode = "tls"
)

// Config configures a Mailer.
type Config struct {
	Host     string
	Port     int
	Username string // empty: no AUTH
	Password string
	TLS      TLSMode
	// From is the sender, "Name <addr>" or "addr"; its domain is also the
	// right-hand side of every Message-ID.
	From string
	// HeloName is the name sent in EHLO; empty means the local host name.
	HeloName string
	// Timeout bounds the dial with its handshake (greeting, EHLO,
	// STARTTLS, AUTH) and each SMTP command after it.
	Timeout time.Duration
	// PoolSize is how many connections may be open at once; they are kept
	// open between messages. Senders beyond it wait for a free connection.
	PoolSize int
	// Pipelining sends MAIL FROM, RCPT TO and DATA in one write when the
	// server offers PIPELINING (RFC 2920): two round trips per message
	// instead of four, which is a pooled connection's whole throughput
	// against a distant server. Off: one command at a time, for a server
	// that offers it and gets it wrong.
	Pipelining bool
	// Chunking sends the message with BDAT (RFC 3030 CHUNKING) in the same
	// write as MAIL FROM and RCPT TO, when the server offers CHUNKING and
	// PIPELINING and Pipelining is on: one round trip per message instead
	// of two, since DATA must wait for its 354 before the message and BDAT
	// need not. Off: DATA, for a server that offers it and gets it wrong.
	Chunking bool
	// ReturnPath, when set, makes each mail's envelope sender (MAIL FROM,
	// the Return-Path the receiving server writes) an address naming its
	// task (MAIL_BOUNCE_DOMAIN, a *verp.Signer); nil keeps From's address.
	ReturnPath ReturnPath
	// TLSConfig overrides the TLS settings (e.g. RootCAs for a private CA);
	// nil means the system roots, ServerName = Host, TLS 1.2 or later.
	TLSConfig *tls.Config
	// DKIM, when set, signs every mail (DKIM_DOMAIN, DKIM_SELECTOR,
	// DKIM_PRIVATE_KEY_FILE); nil sends unsigned.
	DKIM *DKIM
}

// ReturnPath makes the envelope sender of a task's mail (verp.Signer).
type ReturnPath interface {
	Address(taskID string) (string, error)
}

// DefaultConfig is the local mail catcher, no TLS, no AUTH.
func DefaultConfig() Config {
	return Config{
		Host:     "127.0.0.1",
		Port:     1025,
		TLS:      TLSNone,
		From:     "msgpulse <no-reply@msgpulse.local>",
		Timeout:  10 * time.Second,
		PoolSize: 4,
		// Every server that offers it gets it: Postfix, Exim, the big
		// submission services, go-smtp (the catcher).
		Pipelining: true,
		// Postfix (3.4 and later), Exchange, Gmail and go-smtp (the
		// catcher) offer it.
		Chunking: true,
	}
}

// FieldError is an invalid Config field; Field is the Go field name, so
// package config can name the environment variable behind it.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return "smtp config: " + e.Field + ": " + e.Msg }

// Validate reports the first invalid field as a *FieldError.
func (c Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.Host == "":
		return bad("Host", "empty")
	case strings.ContainsAny(c.Host, " \t\r\n/"):
		return bad("Host", "%q is not a host name or IP address", c.Host)
	case c.Port < 1 || c.Port > 65535:
		return bad("Port", "%d is not between 1 and 65535", c.Port)
	case c.TLS != TLSNone && c.TLS != TLSStartTLS && c.TLS != TLSImplicit:
		return bad("TLS", "%q is not none, starttls or tls", c.TLS)
	case c.Timeout <= 0:
		return bad("Timeout", "must be positive")
	case c.PoolSize < 1 || c.PoolSize > 1000:
		return bad("PoolSize", "%d is not between 1 and 1000", c.PoolSize)
	case strings.ContainsAny(c.HeloName, " \t\r\n"):
		return bad("HeloName", "%q contains white space", c.HeloName)
	case c.Username == "" && c.Password != "":
		return bad("Username", "empty while a password is set")
	case c.Username != "" && c.Password == "":
		return bad("Password", "empty while a username is set")
	case c.Username != "" && c.TLS == TLSNone && !isLoopback(c.Host):
		// go-mail would refuse anyway, but only when the first message is
		// sent; saying so at start-up is kinder.
		return bad("TLS", "none would send the password in clear text to %s; use starttls or tls", c.Host)
	}
	if _, _, err := parseFrom(c.From); err != nil {
		return bad("From", "%v", err)
	}
	if c.DKIM != nil {
		if err := c.DKIM.Validate(); err != nil {
			return bad("DKIM", "%v", err)
		}
	}
	return nil
}

func parseFrom(from string) (*netmail.Address, string, error) {
	if strings.TrimSpace(from) == "" {
		return nil, "", fmt.Errorf("empty")
	}
	a, err := netmail.ParseAddress(from)
	if err != nil {
		return nil, "", fmt.Errorf("%q is not an address like \"Name <user@example.com>\": %w", from, err)
	}
	at := strings.LastIndexByte(a.Address, '@')
	if at < 1 || at == len(a.Address)-1 {
		return nil, "", fmt.Errorf("%q has no domain", from)
	}
	return a, a.Address[at+1:], nil
}

// isLoopback matches the hosts go-mail's PLAIN auth accepts without TLS;
// any other would fail at the first AUTH.
func isLoopback(host string) bool {
	return host == "localhost" || host == "127.0.0.1" || host == "::1"
}
