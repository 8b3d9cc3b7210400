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
// What it removes: a URL's password (Passwords); everything of an
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
	s = Passwords(s)
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

// Passwords hides the password of every URL in s (a URL, an error text, a log
// line) so it can be logged or printed: "amqp://guest:guest@host" becomes
// "amqp://guest:xxxxx@host". It also finds credentials in what url.Parse
// refuses or misreads (a password with "#", "%" or "@" in it, "http:/" with
// one slash, no scheme at all): a mistyped URL is exactly the one quoted in
// an error. It may mask a little more than a password, never less. A
// comma-separated list of URLs (AMQP_URL on a cluster) is masked URL by URL.
func Passwords(s string) string {
	// A list of URLs, one per node of a cluster: each one on its own, so
	// that every host stays readable.
	if parts := strings.Split(s, ","); len(parts) > 1 && allURLs(parts) {
		for i, p := range parts {
			parts[i] = Passwords(p)
		}
		return strings.Join(parts, ",")
	}
	if !strings.Contains(s, "@") {
		return s
	}
	var b strings.Builder
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && !isTokenSep(s[i]) {
			continue
		}
		b.WriteString(redactToken(s[start:i]))
		if i < len(s) {
			b.WriteByte(s[i])
		}
		start = i + 1
	}
	return b.String()
}

// allURLs reports whether every part looks like one URL (a scheme, "://",
// no blank), so that a list is split only where it is one.
func allURLs(parts []string) bool {
	for _, p := range parts {
		p = strings.TrimSpace(p)
		i := strings.Index(p, "://")
		if i <= 0 || !isScheme(p[:i]) || strings.ContainsAny(p, " \t\n\"'`") {
			return false
		}
	}
	return true
}

// isTokenSep ends a token for Passwords. Unlike urlEnd it does not stop
// at '<' or '>': a password may hold them ("http://u:pa<ss@host"), and a
// token cut there would leave both halves of it in clear.
func isTokenSep(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '"' || c == '\'' || c == '`'
}

// redactToken masks the password of one URL-like token: what lies between
// the scheme's slashes (or the token's start) and the token's last "@",
// after the first ":", unless that ":" starts a port followed by a path
// (host:8080/a@b is not a password).
func redactToken(t string) string {
	at := strings.LastIndexByte(t, '@')
	if at < 0 {
		return t
	}
	begin := 0
	if i := strings.Index(t, ":/"); i > 0 && isScheme(t[:i]) {
		begin = i + 1
		for begin < len(t) && t[begin] == '/' {
			begin++
		}
	}
	if begin >= at {
		return t
	}
	userinfo := t[begin:at]
	colon := strings.IndexByte(userinfo, ':')
	if colon < 0 {
		return t
	}
	if slash := strings.LastIndexByte(userinfo[:colon], '/'); slash >= 0 { // "http//user:pw@": a mistyped scheme
		begin += slash + 1
		userinfo = t[begin:at]
		colon -= slash + 1
	}
	if rest := userinfo[colon+1:]; strings.Contains(rest, "/") {
		port, _, _ := strings.Cut(rest, "/")
		if isDigits(port) {
			return t
		}
	}
	return t[:begin+colon+1] + "xxxxx" + t[at:]
}

func isScheme(s string) bool {
	for i, c := range s {
		letter := (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
		if !letter && (i == 0 || ((c < '0' || c > '9') && c != '+' && c != '-' && c != '.')) {
			return false
		}
	}
	return s != ""
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}
