package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/msgpulse/msgpulse/internal/apikey"
)

// Allowed is the console's one authorisation decision: may this key use
// the console? It needs the admin scope, as the API's statistics and
// rate-limit writes do.
func Allowed(k apikey.Key) bool {
	return k.Scopes.Allows(apikey.Admin)
}

const (
	sessionCookie = "msgpulse_console"
	loginCookie   = "msgpulse_console_login" // double-submit nonce of the login form
)

// Sessions live in Redis, not in the cookie. The cookie holds only a
// random session id: there is nothing to sign, so no secret (least of all
// one a tenant holds, such as a callback key) can mint a session, and a
// session ends on the server (logout, key removed, changed or no longer
// admin) for every API replica sharing the Redis.
//
// The record is stored under the SHA-256 of the id, so reading Redis's
// key names does not yield a usable cookie; it holds the key's name, the
// key's fingerprint salted with the id (apikey.Key.Fingerprint), and the
// expiry. Each request checks that the record exists, has not expired,
// that its key still exists under that name with the same value, and
// still has the admin scope; any other outcome deletes the record.
type sessions struct {
	rdb    redis.UniversalClient
	prefix string
	ttl    time.Duration
}

// session is a Redis session record.
type session struct {
	Name        string `json:"name"`
	Fingerprint []byte `json:"fp"`
	Expires     int64  `json:"exp"` // unix seconds
}

// sessionIDLen is the length of a session id: 32 random bytes, base64url.
var sessionIDLen = base64.RawURLEncoding.EncodedLen(32)

var errSession = errors.New("no valid console session")

func (s sessions) key(id string) string {
	sum := sha256.Sum256([]byte(id))
	return s.prefix + "console:session:" + hex.EncodeToString(sum[:])
}

// open starts a session for k and returns its id, the cookie's value.
func (s sessions) open(ctx context.Context, k apikey.Key, now time.Time) (string, error) {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand never fails on Linux
	id := base64.RawURLEncoding.EncodeToString(b)
	rec, err := json.Marshal(session{Name: k.Name, Fingerprint: k.Fingerprint([]byte(id)), Expires: now.Add(s.ttl).Unix()})
	if err != nil {
		return "", err
	}
	if err := s.rdb.Set(ctx, s.key(id), rec, s.ttl).Err(); err != nil {
		return "", fmt.Errorf("store the console session: %w", err)
	}
	return id, nil
}

// check returns the key of a live session. errSession means there is
// none (and any record that failed a check is deleted); another error is
// Redis's.
func (s sessions) check(ctx context.Context, id string, lookup func(string) (apikey.Key, bool), now time.Time) (apikey.Key, error) {
	if len(id) != sessionIDLen || strings.ContainsAny(id, ".=") {
		return apikey.Key{}, errSession // not an id we issue: an old signed cookie, or a forgery
	}
	raw, err := s.rdb.Get(ctx, s.key(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return apikey.Key{}, errSession
	}
	if err != nil {
		return apikey.Key{}, fmt.Errorf("read the console session: %w", err)
	}
	var rec session
	k, ok := apikey.Key{}, false
	if json.Unmarshal(raw, &rec) == nil && now.Before(time.Unix(rec.Expires, 0)) {
		k, ok = lookup(rec.Name)
	}
	if !ok || !hmac.Equal(rec.Fingerprint, k.Fingerprint([]byte(id))) || !Allowed(k) {
		// The key is gone, was changed or lost admin: the session ends
		// here for every replica, whatever their API_KEYS say later.
		if err := s.close(ctx, id); err != nil {
			return apikey.Key{}, err
		}
		return apikey.Key{}, errSession
	}
	return k, nil
}

// close ends a session.
func (s sessions) close(ctx context.Context, id string) error {
	if err := s.rdb.Del(ctx, s.key(id)).Err(); err != nil {
		return fmt.Errorf("end the console session: %w", err)
	}
	return nil
}

// csrf is the token every form of a session carries: an HMAC keyed with
// the session id, which only the session's cookie holds, so a token from
// another session (or none) is refused and none can be made without the
// cookie.
func csrf(sessionID string) string {
	m := hmac.New(sha256.New, []byte(sessionID))
	m.Write([]byte("msgpulse console csrf v2"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func checkCSRF(sessionID, token string) bool {
	return token != "" && hmac.Equal([]byte(token), []byte(csrf(sessionID)))
}

// loginGuard limits failed logins per client address and per key name
// tried, across every API replica (the counters are in Redis). A login is
// counted BEFORE its key is checked, in one script that increments both
// counters and returns them, so parallel guesses cannot all pass a check
// made before any of them was counted: at most limit of them reach the
// key check in a window. A successful login gives its count back.
type loginGuard struct {
	rdb    redis.UniversalClient
	prefix string
	limit  int
	window time.Duration
}

// countScript increments the address's and the name's failure counters,
// starting each one's window at its first failure, and returns both.
// KEYS: the address's counter, the name's (one hash tag: one cluster
// slot). ARGV[1]: the window in ms.
var countScript = redis.NewScript(`
local out = {}
for i = 1, 2 do
  out[i] = redis.call('INCR', KEYS[i])
  if redis.call('PTTL', KEYS[i]) < 0 then redis.call('PEXPIRE', KEYS[i], ARGV[1]) end
end
return out
`)

// refundScript gives back one count of each counter that still exists.
var refundScript = redis.NewScript(`
for i = 1, 2 do
  if tonumber(redis.call('GET', KEYS[i]) or '0') > 0 then redis.call('DECR', KEYS[i]) end
end
return 0
`)

func (g loginGuard) keys(ip, name string) []string {
	sum := sha256.Sum256([]byte(name)) // any text may be tried as a name: keep the key short and plain
	// {console-login}: both counters in one slot, for the one script.
	return []string{g.prefix + "console-login:{console-login}:ip:" + ip, g.prefix + "console-login:{console-login}:name:" + hex.EncodeToString(sum[:16])}
}

// count counts one login attempt for ip and name, and reports whether it
// is within the limit for both (only then may the key be checked).
func (g loginGuard) count(ctx context.Context, ip, name string) (bool, error) {
	n, err := countScript.Run(ctx, g.rdb, g.keys(ip, name), g.window.Milliseconds()).Int64Slice()
	if err != nil {
		return false, fmt.Errorf("count the login: %w", err)
	}
	return len(n) == 2 && n[0] <= int64(g.limit) && n[1] <= int64(g.limit), nil
}

// refund gives a successful login's count back.
func (g loginGuard) refund(ctx context.Context, ip, name string) error {
	return refundScript.Run(ctx, g.rdb, g.keys(ip, name)).Err()
}

// clientIP is the caller's address: as the API takes it, or the
// connection's.
func (c *Console) clientIP(r *http.Request) string {
	if c.d.ClientIP != nil {
		return c.d.ClientIP(r)
	}
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
