package config

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/provider/mail"
)

func TestLoadSMTP(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		env    map[string]string
		want   func(*mail.Config) // applied to the defaults
		errVar string             // the variable the error must name
	}{
		{name: "defaults are the local mail catcher", env: map[string]string{}, want: func(*mail.Config) {}},
		{
			name: "everything set",
			env: map[string]string{
				"SMTP_HOST": "smtp.example.com", "SMTP_PORT": "587", "SMTP_USERNAME": "u", "SMTP_PASSWORD": "p",
				"SMTP_TLS": "STARTTLS", "MAIL_FROM": "Acme <no-reply@acme.example>", "SMTP_HELO_NAME": "worker-1",
				"SMTP_TIMEOUT": "30s", "SMTP_POOL_SIZE": "8", "SMTP_PIPELINING": "false", "SMTP_CHUNKING": "false",
			},
			want: func(c *mail.Config) {
				c.Host, c.Port, c.Username, c.Password, c.TLS = "smtp.example.com", 587, "u", "p", mail.TLSStartTLS
				c.From, c.HeloName, c.Timeout, c.PoolSize = "Acme <no-reply@acme.example>", "worker-1", 30*time.Second, 8
				c.Pipelining, c.Chunking = false, false
			},
		},
		{name: "bad port", env: map[string]string{"SMTP_PORT": "smtp"}, errVar: "SMTP_PORT"},
		{name: "bad tls", env: map[string]string{"SMTP_TLS": "ssl"}, errVar: "SMTP_TLS"},
		{name: "pool too big", env: map[string]string{"SMTP_POOL_SIZE": "5000"}, errVar: "SMTP_POOL_SIZE"},
		{name: "pipelining not a boolean", env: map[string]string{"SMTP_PIPELINING": "sometimes"}, errVar: "SMTP_PIPELINING"},
		{name: "chunking not a boolean", env: map[string]string{"SMTP_CHUNKING": "maybe"}, errVar: "SMTP_CHUNKING"},
		{name: "timeout too short", env: map[string]string{"SMTP_TIMEOUT": "1ms"}, errVar: "SMTP_TIMEOUT"},
		{name: "bad from", env: map[string]string{"MAIL_FROM": "msgpulse"}, errVar: "MAIL_FROM"},
		{name: "user without password", env: map[string]string{"SMTP_USERNAME": "u"}, errVar: "SMTP_PASSWORD"},
		{name: "password without user", env: map[string]string{"SMTP_PASSWORD": "p"}, errVar: "SMTP_USERNAME"},
		{
			name:   "password in clear text to a remote host",
			env:    map[string]string{"SMTP_HOST": "smtp.example.com", "SMTP_USERNAME": "u", "SMTP_PASSWORD": "hunter2"},
			errVar: "SMTP_TLS",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := envconf.New(envconf.FromMap(tc.env))
			got := loadSMTP(l)
			if tc.errVar != "" {
				require.ErrorContains(t, l.Err(), tc.errVar)
				require.NotContains(t, l.Errs().Error(), "hunter2", "a password is never in an error")
				return
			}
			require.NoError(t, l.Errs())
			want := mail.DefaultConfig()
			tc.want(&want)
			require.Equal(t, want, got)
		})
	}
}

func TestLoadSMTPDocumentsEveryVariable(t *testing.T) {
	t.Parallel()
	l := envconf.New(envconf.FromMap(nil))
	loadSMTP(l)
	require.Equal(t, []string{"MAIL_FROM", "SMTP_CHUNKING", "SMTP_HELO_NAME", "SMTP_HOST", "SMTP_PASSWORD", "SMTP_PIPELINING", "SMTP_POOL_SIZE", "SMTP_PORT", "SMTP_TIMEOUT", "SMTP_TLS", "SMTP_USERNAME"}, l.Names())
	for _, v := range l.Vars() {
		require.Equal(t, v.Name == "SMTP_PASSWORD", v.Secret, v.Name)
	}
}

func TestLoadMailcatcher(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		env    map[string]string
		want   Mailcatcher
		errVar string
	}{
		{
			name: "defaults", env: map[string]string{},
			want: Mailcatcher{SMTPAddr: "127.0.0.1:1025", HTTPAddr: "127.0.0.1:8025", Max: 1000, LogLevel: "info", LogFormat: "console"},
		},
		{
			name: "everything set",
			env: map[string]string{
				"MAILCATCHER_SMTP_ADDR": "0.0.0.0:2525", "MAILCATCHER_HTTP_ADDR": ":0", "MAILCATCHER_MAX": "5",
				"MAILCATCHER_SMTP_USERNAME": "u", "MAILCATCHER_SMTP_PASSWORD": "p", "LOG_LEVEL": "debug", "LOG_FORMAT": "json",
			},
			want: Mailcatcher{SMTPAddr: "0.0.0.0:2525", HTTPAddr: ":0", Max: 5, Username: "u", Password: "p", LogLevel: "debug", LogFormat: "json"},
		},
		{name: "no port", env: map[string]string{"MAILCATCHER_SMTP_ADDR": "127.0.0.1"}, errVar: "MAILCATCHER_SMTP_ADDR"},
		{name: "bad port", env: map[string]string{"MAILCATCHER_HTTP_ADDR": "127.0.0.1:http"}, errVar: "MAILCATCHER_HTTP_ADDR"},
		{name: "max 0", env: map[string]string{"MAILCATCHER_MAX": "0"}, errVar: "MAILCATCHER_MAX"},
		{name: "user without password", env: map[string]string{"MAILCATCHER_SMTP_USERNAME": "u"}, errVar: "MAILCATCHER_SMTP_PASSWORD"},
		{name: "bad log format", env: map[string]string{"LOG_FORMAT": "xml"}, errVar: "LOG_FORMAT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, l := LoadMailcatcher(envconf.FromMap(tc.env))
			if tc.errVar != "" {
				require.ErrorContains(t, l.Err(), tc.errVar)
				return
			}
			require.NoError(t, l.Errs())
			require.Equal(t, tc.want, got)
		})
	}
}

// The DKIM key is read at start: a file that is missing or holds no key
// DKIM can sign with stops the consumer, naming DKIM_PRIVATE_KEY_FILE; a
// good one reaches the mailer's config.
func TestDKIMKeyIsReadAtStart(t *testing.T) {
	dir := t.TempDir()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	der, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	good := filepath.Join(dir, "dkim.pem")
	bad := filepath.Join(dir, "bad.pem")
	require.NoError(t, os.WriteFile(good, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(bad, []byte("not a key"), 0o600))
	for _, tc := range []struct {
		name, file, wantErr string
	}{
		{"an Ed25519 key", good, ""},
		{"no such file", filepath.Join(dir, "none.pem"), "DKIM_PRIVATE_KEY_FILE"},
		{"not a key", bad, "DKIM_PRIVATE_KEY_FILE"},
	} {
		env := map[string]string{"DKIM_DOMAIN": "example.com", "DKIM_SELECTOR": "s1", "DKIM_PRIVATE_KEY_FILE": tc.file}
		c, l := LoadConsumer(withDefaults(func(k string) (string, bool) { v, ok := env[k]; return v, ok }))
		err := receiptErr(l.Errs())
		if tc.wantErr == "" {
			require.NoError(t, err, tc.name)
			require.NotNil(t, c.SMTP.DKIM, tc.name)
			require.Equal(t, "s1", c.SMTP.DKIM.Selector, tc.name)
			continue
		}
		require.ErrorContains(t, err, tc.wantErr, tc.name)
	}
}
