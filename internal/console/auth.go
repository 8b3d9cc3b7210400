package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/msgpulse/msgpulse/internal/apikey"
)

// Allowed is the console's one authorisation decision: may this key use
// the console? It needs the admin scope, as the API's statistics and
// rate-limit writes do (a key configured without scopes has them all).
func Allowed(k apikey.Key) bool {
	return k.Scopes.Allows(apikey.Admin)
}

const (
	sessionCookie = "msgpulse_console"
	loginCookie   = "msgpulse_console_login" // double-submit nonce of the login form
)

// signer signs session cookies and CSRF tokens with a key derived from
// CODE_SECRET, so no new secret has to be configured, and a session
// cannot be forged without the secret the API already guards.
type signer struct{ key []byte }

func newSigner(secret string) signer {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("msgpulse console session v1"))
	return signer{key: m.Sum(nil)}
}

func (s signer) mac(parts ...string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(strings.Join(parts, "\x00")))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// session is the cookie's value: the key's name and when the session
// ends, signed.
func (s signer) session(name string, until time.Time) string {
	n := base64.RawURLEncoding.EncodeToString([]byte(name))
	exp := strconv.FormatInt(until.Unix(), 10)
	return n + "." + exp + "." + s.mac("session", n, exp)
}

var errSession = errors.New("no valid console session")

// verify returns the key name of a valid, unexpired session value.
func (s signer) verify(v string, now time.Time) (string, error) {
	parts := strings.Split(v, ".")
	if len(parts) != 3 || !hmac.Equal([]byte(parts[2]), []byte(s.mac("session", parts[0], parts[1]))) {
		return "", errSession
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || !now.Before(time.Unix(exp, 0)) {
		return "", errSession
	}
	name, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return "", errSession
	}
	return string(name), nil
}

// csrf is the token every form of a session carries: bound to the
// session value, so a token from another session (or none) is refused.
func (s signer) csrf(sessionValue string) string { return s.mac("csrf", sessionValue) }

func (s signer) checkCSRF(sessionValue, token string) bool {
	return token != "" && hmac.Equal([]byte(token), []byte(s.csrf(sessionValue)))
}

// loginGuard slows down guessing keys: each client address may fail to
// log in a few times a minute, then is refused until its budget refills.
type loginGuard struct {
	mu  sync.Mutex
	ips map[string]*rate.Limiter
}

// loginFailures is the burst of failed logins an address is allowed, and
// how fast that budget refills.
const (
	loginFailures = 10
	loginRefill   = 6 * time.Second
)

// blocked reports whether ip has used up its failed logins.
func (g *loginGuard) blocked(ip string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	l, ok := g.ips[ip]
	return ok && l.Tokens() < 1
}

// failed spends one of ip's failed logins.
func (g *loginGuard) failed(ip string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.ips) > 10_000 {
		g.ips = map[string]*rate.Limiter{} // bounded memory: an attacker with that many addresses is not slowed by this anyway
	}
	l, ok := g.ips[ip]
	if !ok {
		l = rate.NewLimiter(rate.Every(loginRefill), loginFailures)
		g.ips[ip] = l
	}
	l.Allow()
}

func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func nonce() string {
	b := make([]byte, 18)
	_, _ = rand.Read(b) // crypto/rand never fails on Linux
	return base64.RawURLEncoding.EncodeToString(b)
}

// setCookie sets a console cookie: HttpOnly, SameSite=Strict, and Secure
// when the browser reached us over HTTPS (directly or through a proxy
// that terminates TLS); over plain HTTP a Secure cookie would never come
// back.
func setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge time.Duration) {
	secure := r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
	//nolint:gosec // Secure is set whenever the request came over HTTPS, see above
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: "/console", MaxAge: int(maxAge.Seconds()),
		HttpOnly: true, Secure: secure, SameSite: http.SameSiteStrictMode})
}
