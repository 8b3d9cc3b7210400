// Package redact takes secrets out of text on its way out of a msgpulse
// process. It is the one place that knows what a secret looks like in
// text; every sink of text a tenant or an operator can read calls Text:
// the status store for a message's lastError (which GET /api/messages and
// the message's callback carry), the logging core for every log line of
// every program, the account state for an account's down reason. So no
// provider, vendor answer or Go error can carry a secret out, whichever
// package made the text: a new provider cannot forget to scrub its
// errors, because it does not scrub them at all.
//
// What it removes: a URL's password (envconf.Redact); a URL's query
// string and fragment, where tokens, keys and signatures travel (WeCom's
// access_token and corpsecret, a robot's key, Aliyun's Signature, a
// callbackUrl's token); the value of every parameter whose name says it is
// a secret, wherever it stands (access_token=…, &key=…, "corpsecret":"…",
// Signature=…); and the credentials of an Authorization header (Bearer …,
// Basic …). It may remove a little more than a secret, never less.
//
// It must never log, and never keep what it removed.
package redact

import (
	"regexp"
	"strings"

	"github.com/msgpulse/msgpulse/internal/envconf"
)

// Mark replaces what Text removes.
const Mark = "[redacted]"

// secretNames are parameter names whose value is a secret wherever they
// stand; queryNames only after "?" or "&" (as words, "key" and "sign" are
// too common to mask).
const (
	secretNames = `access_?token|refresh_?token|corp_?secret|client_?secret|app_?secret|secret_?key|access_?key_?secret|api_?key|secret|signature|password|passwd|token|credential`
	queryNames  = `key|sign|sig`
)

var (
	// name=value, the name standing alone (not the tail of a longer word).
	namedValue = regexp.MustCompile(`(?i)((?:^|[^a-z0-9_])(?:` + secretNames + `)=|[?&](?:` + queryNames + `)=)[^\s"'&,;<>]*`)
	// "name": "value" (JSON).
	jsonValue = regexp.MustCompile(`(?i)("(?:` + secretNames + `|` + queryNames + `)"\s*:\s*")(?:[^"\\]|\\.)*`)
	// An Authorization header's credentials.
	authValue = regexp.MustCompile(`(?i)(\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]{6,}`)
)

// Text returns s without the secrets it holds (see the package comment).
func Text(s string) string {
	if !mayHold(s) {
		return s
	}
	s = envconf.Redact(s)
	s = urlQueries(s)
	s = namedValue.ReplaceAllString(s, "${1}"+Mark)
	s = jsonValue.ReplaceAllString(s, "${1}"+Mark)
	return authValue.ReplaceAllString(s, "${1}"+Mark)
}

// mayHold is Text's fast path: whether s has a character every form of
// secret above needs ("@" of a password, "?" or "#" of a query, "=" of a
// parameter, `":` of JSON, "bearer"/"basic" of a header). Log fields and
// most errors have none.
func mayHold(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '@', '?', '#', '=':
			return true
		case '"':
			if i+1 < len(s) && s[i+1] == ':' {
				return true
			}
		case 'b', 'B':
			if hasFold(s[i:], "bearer") || hasFold(s[i:], "basic") {
				return true
			}
		}
	}
	return false
}

func hasFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// urlQueries cuts the query string and fragment of every absolute URL in
// s: from its first "?" or "#" to the end of the URL (a blank, a quote or
// an angle bracket, as Go's url.Error and vendors quote them).
func urlQueries(s string) string {
	var b strings.Builder
	rest := s
	for {
		i := strings.Index(rest, "://")
		if i < 0 {
			break
		}
		end := i + 3
		for end < len(rest) && !urlEnd(rest[end]) {
			end++
		}
		q := strings.IndexAny(rest[i+3:end], "?#")
		if q < 0 {
			b.WriteString(rest[:end])
			rest = rest[end:]
			continue
		}
		q += i + 3
		b.WriteString(rest[:q+1])
		b.WriteString(Mark)
		rest = rest[end:]
	}
	if b.Len() == 0 {
		return s
	}
	b.WriteString(rest)
	return b.String()
}

func urlEnd(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '"', '\'', '`', '<', '>':
		return true
	}
	return false
}
