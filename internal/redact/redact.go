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
// What it removes: a URL's password (envconf.Redact); everything of an
// absolute URL past its scheme, host and first path segment: the rest of
// the path (Slack-style and robot-style hooks carry their secret there,
// https://hooks.example/services/T0/B0/SECRET), the query string and the
// fragment, where tokens, keys and signatures travel (WeCom's
// access_token and corpsecret, a robot's key, Aliyun's Signature, a
// callbackUrl's token); the value of every parameter whose name says it is
// a secret, wherever it stands (access_token=…, &key=…, "corpsecret" :
// "…" with any blanks, Signature=…); the credentials of an Authorization
// header (Bearer …, Basic …, Token …); and header-style values of names
// that hold secrets (X-Api-Key: …, Authorization: …, X-Twilio-Signature:
// …); the token of an SMS vendor's hook path (/hooks/sms/aliyun/TOKEN),
// relative as a router or a proxy quotes it; and the rest of a path,
// absolute or not, after a prefix whose next segment is a token
// (secretPaths: /unsubscribe/TOKEN, as in "no such endpoint: GET
// /unsubscribe/…"). It may remove a little more than a secret, never less.
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
	// "name": value (JSON, a number or a word: a numeric key is a secret too).
	jsonBare = regexp.MustCompile(`(?i)("(?:` + secretNames + `|` + queryNames + `)"\s*:\s*)[^\s",}\]\[{][^\s,}\]]*`)
	// An Authorization header's credentials.
	authValue = regexp.MustCompile(`(?i)(\b(?:bearer|basic|token)\s+)[A-Za-z0-9._~+/=-]{6,}`)
	// A path whose segment after a secretPaths prefix is a token, up to
	// the end of the path; not a route's ":param", which logs name.
	secretPath = regexp.MustCompile(`(` + strings.Join(secretPaths, "|") + `)[^\s"'<>:][^\s"'<>]*`)
	// A header-style "Name: value" whose name holds a secret: the value up
	// to the end of the line or a quote (a header value may hold blanks).
	// The SMS vendors' hooks' paths (internal/receipt/smshook), relative:
	// their last segment is the hook's secret token.
	hookToken   = regexp.MustCompile(`(/hooks/sms/[a-z]+/)[^\s"'?#/]+`)
	headerValue = regexp.MustCompile(`(?i)((?:^|[^a-z0-9_-])(?:x-api-key|api[-_]?key|x-auth-token|auth[-_]?token|authorization|proxy-authorization|x-twilio-signature)\s*:[ \t]*)[^\s"'][^"'\r\n]*`)
)

// secretPaths are the path prefixes whose next segment is a secret: the
// signed token of a one-click unsubscribe link (unsub.Path).
var secretPaths = []string{"/unsubscribe/"}

// Text returns s without the secrets it holds (see the package comment).
func Text(s string) string {
	if !mayHold(s) {
		return s
	}
	s = envconf.Redact(s)
	s = urlQueries(s)
	s = namedValue.ReplaceAllString(s, "${1}"+Mark)
	s = jsonValue.ReplaceAllString(s, "${1}"+Mark)
	s = jsonBare.ReplaceAllString(s, "${1}"+Mark)
	s = authValue.ReplaceAllString(s, "${1}"+Mark)
	s = hookToken.ReplaceAllString(s, "${1}"+Mark)
	s = secretPath.ReplaceAllString(s, "${1}"+Mark)
	return headerValue.ReplaceAllString(s, "${1}"+Mark)
}

// URL is how a URL is named where it leaves the process on its own (a
// failed callback's log line): its scheme, host and first path segment,
// never the rest, nor a password, query or fragment.
func URL(u string) string { return Text(u) }

// mayHold is Text's fast path: whether s has a character every form of
// secret above needs ("@" of a password, "?" or "#" of a query, "=" of a
// parameter, "://" of a URL's path, `"` and ":" with blanks between of
// JSON, "bearer", "basic" and "token" of a credential, a secret's name
// before ":" of a header). Log fields and most errors have none; a
// false "may" costs only the slow path.
func mayHold(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '@', '?', '#', '=':
			return true
		case ':':
			if strings.HasPrefix(s[i:], "://") || secretBefore(s[:i]) {
				return true
			}
		case '/':
			if strings.HasPrefix(s[i:], "/hooks/sms/") || secretPathAt(s[i:]) {
				return true
			}
		case 'b', 'B', 't', 'T':
			if hasFold(s[i:], "bearer") || hasFold(s[i:], "basic") || hasFold(s[i:], "token") {
				return true
			}
		}
	}
	return false
}

// secretBefore reports whether s (the text before a ":") ends in a JSON
// string's closing quote or in a name a header-style secret has, blanks
// aside.
func secretBefore(s string) bool {
	s = strings.TrimRight(s, " \t")
	if strings.HasSuffix(s, `"`) {
		return true
	}
	for _, n := range []string{"key", "authorization", "signature"} {
		if len(s) >= len(n) && strings.EqualFold(s[len(s)-len(n):], n) {
			return true
		}
	}
	return false
}

func secretPathAt(s string) bool {
	for _, p := range secretPaths {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func hasFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// urlQueries cuts every absolute URL in s after its scheme, host and
// first path segment: from the "/" that starts a second segment, or the
// first "?" or "#", to the end of the URL (a blank, a quote or an angle
// bracket, as Go's url.Error and vendors quote them).
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
		q := cutAt(rest[i+3 : end])
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

// cutAt is where a URL's text after "://" stops being shown: its first
// "?" or "#", or the "/" after its first path segment; -1 when it has
// nothing more.
func cutAt(u string) int {
	q := strings.IndexAny(u, "?#")
	path := u
	if q >= 0 {
		path = u[:q]
	}
	if h := strings.IndexByte(path, '/'); h >= 0 {
		if seg := strings.IndexByte(path[h+1:], '/'); seg >= 0 {
			return h + 1 + seg
		}
	}
	return q
}

func urlEnd(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '"', '\'', '`', '<', '>':
		return true
	}
	return false
}
