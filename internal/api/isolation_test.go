package api

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/callbackkey"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/envconf"
)

// Keys of two tenants written without scopes, as issue 21 found them
// (API_KEYS=shopA:k1,shopB:k2, with keys long enough to be accepted), and
// one operator with admin written.
const (
	shopAKey = "k1-0123456789abcdefghabcdef"
	shopBKey = "k2-0123456789abcdefghabcdef"
	opsKey   = "ops-0123456789abcdefghabcdef"
)

func isolationKeys(t *testing.T, extra ...string) []apikey.Key {
	t.Helper()
	entries := append([]string{"shopA:" + shopAKey, "shopB:" + shopBKey, "ops:" + opsKey + ":admin"}, extra...)
	cfg, l := config.LoadAPI(envconf.FromMap(map[string]string{"API_KEYS": strings.Join(entries, ",")}))
	require.NoError(t, l.Err())
	return cfg.APIKeys
}

// shopA:k1 (no scopes) sends and reads, and gets 403 on every admin route;
// only the key with admin written gets through.
func TestKeyWithoutScopesIsNotAdmin(t *testing.T) {
	h := setup(t, options{keys: isolationKeys(t)})
	rl := map[string]any{"id": "aliyun", "provider": "aliyun", "requestsPerSecond": 5, "isEnabled": false}
	r := h.do("POST", "/api/rate-limits", rl, "X-API-Key", shopAKey)
	require.Equal(t, http.StatusForbidden, r.Status, r.Msg)
	require.Contains(t, r.Msg, "lacks the admin scope (it has send+read)")
	for _, path := range []string{"/api/queues/stats", "/api/dlq/stats"} {
		require.Equal(t, http.StatusForbidden, h.do("GET", path, nil, "X-API-Key", shopBKey).Status, path)
	}
	require.Equal(t, http.StatusAccepted, h.send(shopAKey, notice("a@example.com")).Status, "it still sends")
	r = h.do("POST", "/api/rate-limits", rl, "X-API-Key", opsKey)
	require.Equal(t, http.StatusCreated, r.Status, r.Msg)
}

// name:SHA256=<hex> (upper case, as issue 21 found it) is a digest: the
// key authenticates, the text "SHA256=<hex>" does not; a malformed digest
// stops the API at start.
func TestUpperCaseDigestIsADigest(t *testing.T) {
	const plain = "upper-digest-key-0123456789abcdefgh"
	hexDigest := strings.ToUpper(apikey.Digest(plain))
	h := setup(t, options{keys: isolationKeys(t, "shopA/ci:SHA256="+hexDigest)})
	r := h.send(plain, notice("d@example.com"))
	require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
	for _, text := range []string{"SHA256=" + hexDigest, hexDigest, "sha256=" + strings.ToLower(hexDigest)} {
		require.Equal(t, http.StatusUnauthorized, h.send(text, notice("d@example.com")).Status, "%s is not a key", text)
	}
	for _, bad := range []string{"SHA256=" + hexDigest[:63], "Sha256=" + hexDigest + "00", "sha256=zz" + hexDigest[2:]} {
		_, l := config.LoadAPI(envconf.FromMap(map[string]string{"API_KEYS": "x:" + bad}))
		require.ErrorContains(t, l.Err(), "API_KEYS", bad)
		require.ErrorContains(t, l.Err(), "sha256= needs 64 hex digits", bad)
	}
}

// A callbackUrl whose tenant has no callback key is 400 naming the
// settings, on a single send and on a batch; with CALLBACK_SECRETS naming
// only shopA, shopB is refused and shopA accepted.
func TestCallbackURLNeedsACallbackKey(t *testing.T) {
	none := callbackkey.Keys{}
	h := setup(t, options{keys: isolationKeys(t), callbackKeys: &none})
	withCallback := func(m map[string]any) map[string]any {
		m["callbackUrl"] = "https://93.184.216.34/status"
		return m
	}
	r := h.send(shopAKey, withCallback(notice("c@example.com")))
	require.Equal(t, http.StatusBadRequest, r.Status, r.Msg)
	require.Contains(t, r.Msg, "CALLBACK_SECRETS")
	require.Contains(t, r.Msg, "CALLBACK_SECRET ")
	batch := withCallback(notice(""))
	delete(batch, "recipient")
	batch["recipients"] = []string{"c1@example.com", "c2@example.com"}
	r = h.do("POST", "/api/messages/batch", batch, "X-API-Key", shopAKey)
	require.Equal(t, http.StatusBadRequest, r.Status, r.Msg)
	require.Contains(t, r.Msg, "CALLBACK_SECRETS")
	require.Equal(t, http.StatusAccepted, h.send(shopAKey, notice("c@example.com")).Status, "without callbackUrl nothing changes")

	onlyA, err := callbackkey.New(map[string]string{"shopA": "shopA-tenant-secret-0001"}, "")
	require.NoError(t, err)
	some := setup(t, options{share: h, keys: isolationKeys(t, "shopB/backend:shopB-backend-0123456789abcdefgh"), callbackKeys: &onlyA})
	require.Equal(t, http.StatusAccepted, some.send(shopAKey, withCallback(notice("c@example.com"))).Status, "tenant shopA has a key")
	r = some.send("shopB-backend-0123456789abcdefgh", withCallback(notice("c@example.com")))
	require.Equal(t, http.StatusBadRequest, r.Status, "tenant shopB has none: %s", r.Msg)
	require.Contains(t, r.Msg, "tenant shopB")
}

// The 31st failed key check in a minute from one address is 429 with
// Retry-After, and so is every request from it after, a right key's too;
// another replica sharing Redis counts the same failures.
func TestFailedKeyChecksAreLimitedPerAddress(t *testing.T) {
	h := setup(t, options{keys: isolationKeys(t), authFailures: 30})
	statuses := map[int]int{}
	for i := 1; i <= 30; i++ {
		r := h.send("wrong-key-"+strconv.Itoa(i), notice("e@example.com"))
		statuses[r.Status]++
	}
	require.Equal(t, map[int]int{401: 30}, statuses, "30 failures are answered 401")
	r := h.send("wrong-key-31", notice("e@example.com"))
	require.Equal(t, http.StatusTooManyRequests, r.Status, "the 31st failure: %s", r.Msg)
	require.Contains(t, r.Msg, "AUTH_FAILURES_PER_MINUTE")
	retry, err := strconv.Atoi(r.Header.Get("Retry-After"))
	require.NoError(t, err)
	require.True(t, retry >= 1 && retry <= 60, "Retry-After %d", retry)
	r = h.send(shopAKey, notice("e@example.com"))
	require.Equal(t, http.StatusTooManyRequests, r.Status, "a right key from a blocked address learns nothing: %s", r.Msg)

	other := setup(t, options{share: h, keys: isolationKeys(t), authFailures: 30})
	require.Equal(t, http.StatusTooManyRequests, other.send("wrong-key-32", notice("e@example.com")).Status, "another replica sees the same count")
	t.Logf("statuses of the first 30 failures: %v; 31st: 429, Retry-After %ds", statuses, retry)
}

// Parallel guesses cannot race past the limit: each is counted before it
// is answered, so of 80 concurrent wrong keys exactly 30 are 401.
func TestParallelGuessesCannotRacePastTheLimit(t *testing.T) {
	h := setup(t, options{keys: isolationKeys(t), authFailures: 30})
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for i := range 80 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequest("POST", h.http.URL+"/api/messages/send", bytes.NewReader([]byte(`{}`)))
			if err != nil {
				return
			}
			req.Header.Set("X-API-Key", "guess-"+strconv.Itoa(i)+"-0123456789abcdefgh")
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			_ = resp.Body.Close()
			mu.Lock()
			statuses[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.Equal(t, map[int]int{401: 30, 429: 50}, statuses)
}
