package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/dispatch"
	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/fraud"
	"github.com/msgpulse/msgpulse/internal/phone"
	"github.com/msgpulse/msgpulse/internal/provider/sms"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

// smsVendor is the SMS vendor the consumer sends to (SMS_PROVIDER=webhook):
// it checks each request's signature, as the webhook's receiver must, and
// keeps what would have been paid for: every SMS, with its code.
type smsVendor struct {
	srv    *httptest.Server
	secret string
	mu     sync.Mutex
	codes  map[string]string // number → the last code sent to it
	count  map[string]int    // number → SMS sent to it
	bad    int
}

func newSMSVendor(t *testing.T) *smsVendor {
	v := &smsVendor{secret: "pumping-test-webhook-secret", codes: map[string]string{}, count: map[string]int{}}
	v.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		v.mu.Lock()
		defer v.mu.Unlock()
		if err := sms.VerifyWebhookSignature(v.secret, r.Header.Get(sms.WebhookTimestampHeader), body, r.Header.Get(sms.WebhookSignatureHeader)); err != nil {
			v.bad++
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var m struct {
			To     string            `json:"to"`
			TaskID string            `json:"taskId"`
			Params map[string]string `json:"params"`
		}
		if err := json.Unmarshal(body, &m); err != nil || m.To == "" {
			http.Error(w, "bad payload", http.StatusBadRequest)
			return
		}
		v.count[m.To]++
		v.codes[m.To] = m.Params["code"]
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"messageId":"vendor-%s"}`, m.TaskID)
	}))
	t.Cleanup(v.srv.Close)
	return v
}

func (v *smsVendor) code(to string) (string, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	c, ok := v.codes[to]
	return c, ok
}

// sent is how many SMS went to numbers that match.
func (v *smsVendor) sent(match func(string) bool) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for to, c := range v.count {
		if match(to) {
			n += c
		}
	}
	return n
}

// startConsumer runs cmd/consumer's Run in this process on h's broker and
// Redis, sending SMS to v, until the test ends.
func startConsumer(t *testing.T, h *harness, v *smsVendor) {
	t.Helper()
	cfg, l := config.LoadConsumer(envconf.FromMap(map[string]string{
		"AMQP_URL": h.broker.URL, "REDIS_URL": h.redis.URL, "REDIS_MODE": h.redis.Mode, "REDIS_PREFIX": h.redis.Prefix,
		"CHANNELS": "sms", "METRICS_ADDR": "off", "CONSUMER_ID": "pumping-test",
		"SMS_PROVIDER": "webhook", "SMS_WEBHOOK_URL": v.srv.URL, "SMS_WEBHOOK_SECRET": v.secret,
	}))
	require.NoError(t, l.Err())
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- dispatch.Run(ctx, cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), dispatch.WithReady(func() { close(ready) }))
	}()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("consumer stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("consumer not ready in 30s")
	}
}

// legitNumbers returns n distinct valid mobile numbers of the countries,
// random in their whole mobile ranges (the example number's first three
// digits kept, the rest drawn), none in the prefixes to avoid.
func legitNumbers(t *testing.T, rng *rand.Rand, n int, countries []string, avoid map[string]bool, cfg *fraud.Config) []string {
	t.Helper()
	examples := map[string]string{"CN": "+8613812345678", "US": "+12015550123", "DE": "+4915123456789", "IN": "+919876543210", "BR": "+5511961234567"}
	seen := map[string]bool{}
	var out []string
	for len(out) < n {
		ex := mustParse(t, examples[countries[len(out)%len(countries)]])
		keep := len(ex.E164) - len(ex.National) + 3 // +, the calling code, 3 digits
		b := []byte(ex.E164)
		for i := keep; i < len(b); i++ {
			b[i] = byte('0' + rng.IntN(10))
		}
		num, err := phone.Parse(string(b))
		if err != nil || (num.Type != phone.Mobile && num.Type != phone.FixedLineOrMobile) || seen[num.E164] || avoid[cfg.Prefix(num)] {
			continue
		}
		seen[num.E164] = true
		out = append(out, num.E164)
	}
	return out
}

// event is one request of the scenario, at a time of its simulated minute.
type event struct {
	at     time.Duration
	attack bool
	number string
	ip     string
	verify time.Duration // legitimate codes: verified this long after (0: never)
	status int
	msg    string
}

// The attack of issue 39 against the API as it ships (FRAUD_GUARD's
// defaults; only the per-IP, per-key and global SMS limits lifted, so that
// what is measured is the guard), with a consumer sending to an SMS vendor
// that counts what would have been paid for:
//   - the attack: 2,000 codes over 60 s to sequential valid mobile numbers
//     of two prefixes in two countries, from 200 client IPs, never
//     verified;
//   - at the same time, 500 codes to random valid mobile numbers of five
//     countries, 80% verified within 30 s.
//
// The scenario's minute runs on the limiter's clock (Limiter.Advance),
// second by second, not on the wall's: the guard's windows and blocks see
// the attack's 60 s and the users' verification delays as they would be,
// and the test takes seconds.
func TestPumpingAttackAgainstTheDefaults(t *testing.T) {
	cfg, l := config.LoadAPI(envconf.FromMap(map[string]string{
		"API_KEYS":                     "shop/backend:" + shopKey,
		"VERIFY_MAX_PER_IP_PER_MINUTE": "0", "LIMIT_PER_API_KEY_PER_MINUTE": "0", "LIMIT_SMS_PER_SECOND": "0",
	}))
	require.NoError(t, l.Err())
	require.Equal(t, fraud.Standard, cfg.Fraud.Level, "FRAUD_GUARD's default")
	h := setup(t, options{keys: cfg.APIKeys, limits: cfg.Limits, fraud: cfg.Fraud, smsCodes: cfg.SMSCodes})
	vendor := newSMSVendor(t)
	startConsumer(t, h, vendor)

	// The attack's two prefixes: a UK and a Philippine mobile block.
	attackStarts := []string{"+447400120000", "+639171230000"}
	avoid := map[string]bool{}
	for _, s := range attackStarts {
		n, err := phone.Parse(s)
		require.NoError(t, err)
		require.Equal(t, phone.Mobile, n.Type, s)
		avoid[cfg.Fraud.Prefix(n)] = true
	}
	isAttack := func(to string) bool {
		for _, s := range attackStarts {
			if strings.HasPrefix(to, s[:len(s)-4]) {
				return true
			}
		}
		return false
	}
	var events []*event
	for i := range 2000 {
		start := attackStarts[i%2]
		var base int
		_, _ = fmt.Sscan(start[len(start)-4:], &base)
		events = append(events, &event{at: time.Duration(i) * 30 * time.Millisecond, attack: true,
			number: fmt.Sprintf("%s%04d", start[:len(start)-4], base+i/2), ip: fmt.Sprintf("198.18.0.%d", i%200)})
	}
	rng := rand.New(rand.NewPCG(39, 2026))
	for j, n := range legitNumbers(t, rng, 500, []string{"CN", "US", "DE", "IN", "BR"}, avoid, &cfg.Fraud) {
		e := &event{at: time.Duration(j) * 120 * time.Millisecond, number: n, ip: fmt.Sprintf("203.0.113.%d", rng.IntN(250)+1)}
		if rng.Float64() < 0.8 {
			e.verify = time.Duration(2+rng.IntN(28)) * time.Second
		}
		events = append(events, e)
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].at < events[j].at })

	request := func(e *event) {
		body := smsCode(e.number, "login")
		body["clientIp"] = e.ip
		r := h.do("POST", "/api/verification-codes", body, "X-API-Key", shopKey)
		e.status, e.msg = r.Status, r.Msg
	}
	verify := func(e *event) {
		var code string
		testenv.WaitFor(t, 20*time.Second, "the SMS to "+e.number, func() bool {
			var ok bool
			code, ok = vendor.code(e.number)
			return ok
		})
		r := h.do("POST", "/api/verification-codes/verify", map[string]any{"channel": "sms", "recipient": e.number, "purpose": "login", "code": code}, "X-API-Key", shopKey)
		require.Equal(t, http.StatusOK, r.Status, r.Msg)
		var v VerifyResult
		r.data(t, &v)
		require.True(t, v.Valid, e.number)
	}
	type due struct {
		at time.Duration
		e  *event
	}
	var verifications []due
	wall := time.Now()
	next := 0
	for sec := time.Duration(0); next < len(events) || len(verifications) > 0; sec += time.Second {
		if sec > 0 {
			h.limiter.Advance(time.Second)
		}
		var batch []*event
		for next < len(events) && events[next].at < sec+time.Second {
			batch = append(batch, events[next])
			next++
		}
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for _, e := range batch {
			wg.Add(1)
			sem <- struct{}{}
			go func() { defer wg.Done(); defer func() { <-sem }(); request(e) }()
		}
		wg.Wait()
		for _, e := range batch {
			if !e.attack && e.status == http.StatusAccepted && e.verify > 0 {
				verifications = append(verifications, due{e.at + e.verify, e})
			}
		}
		var later []due
		for _, d := range verifications {
			if d.at < sec+time.Second {
				verify(d.e)
			} else {
				later = append(later, d)
			}
		}
		verifications = later
	}

	var attack, attackAfter150, refusedAfter150, legit, legitGuarded, legitOther, attackAccepted, legitAccepted int
	for _, e := range events {
		pumping := e.status == http.StatusTooManyRequests && strings.Contains(e.msg, "SMS pumping")
		if e.attack {
			attack++
			if e.status == http.StatusAccepted {
				attackAccepted++
			}
			if attack > 150 {
				attackAfter150++
				if pumping && strings.Contains(e.msg, cfg.Fraud.Prefix(mustParse(t, e.number))) {
					refusedAfter150++
				}
			}
			continue
		}
		legit++
		switch {
		case e.status == http.StatusAccepted:
			legitAccepted++
		case pumping:
			legitGuarded++
		default:
			legitOther++
			t.Logf("legitimate %s: %d %s", e.number, e.status, e.msg)
		}
	}
	testenv.WaitFor(t, 60*time.Second, "every accepted code at the vendor", func() bool {
		return vendor.sent(isAttack) == attackAccepted && vendor.sent(func(to string) bool { return !isAttack(to) }) == legitAccepted
	})
	paid := vendor.sent(isAttack)
	t.Logf("attack: %d requests, %d accepted, %d SMS paid for (%.1f%%); after the first 150: %d of %d refused as SMS pumping (%.1f%%)",
		attack, attackAccepted, paid, 100*float64(paid)/float64(attack), refusedAfter150, attackAfter150, 100*float64(refusedAfter150)/float64(attackAfter150))
	t.Logf("legitimate: %d requests, %d accepted, %d refused by the guard, %d otherwise; scenario of %s ran in %s",
		legit, legitAccepted, legitGuarded, legitOther, events[len(events)-1].at.Round(time.Second), time.Since(wall).Round(100*time.Millisecond))
	require.Equal(t, 2000, attack)
	require.Equal(t, 500, legit)
	require.GreaterOrEqual(t, refusedAfter150*100, 90*attackAfter150, "at least 90% of the attack after its first 150 refused naming the prefix")
	require.LessOrEqual(t, legitGuarded*100, legit, "at most 1% of the legitimate requests refused by the guard")
	require.Zero(t, legitOther, "no legitimate request refused otherwise")
	require.LessOrEqual(t, paid*100, 15*attack, "the vendor got at most 15% of the attack")
	require.Zero(t, vendor.bad, "every webhook was signed")
	blocks, err := h.guard.Blocks(testenv.Context(t, 5*time.Second), "shop")
	require.NoError(t, err)
	require.Len(t, blocks, 2, "the two attacked prefixes, and only they, are blocked: %+v", blocks)
}

func mustParse(t *testing.T, s string) phone.Number {
	t.Helper()
	n, err := phone.Parse(s)
	require.NoError(t, err)
	return n
}
