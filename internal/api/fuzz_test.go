package api

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/msgpulse/msgpulse/internal/provider/wecom"
)

// Fuzz targets of the request decoders (issue 43): whatever body a caller
// sends, the decoder and validator answer 400 or 413 or accept, never
// panic, and what they accept holds the invariants the rest of the API
// relies on. `go test` runs the seeds; make test (scripts/test.sh, leg
// fuzz) runs each target for a short time.

const fuzzLimit = 64 << 10

var fuzzNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func fuzzLocales(l string) bool { return l == "en" || l == "zh-CN" }

// refused reports whether e is an answer a bad body may get.
func refused(t *testing.T, e *apiError) {
	t.Helper()
	if e.Status != http.StatusBadRequest && e.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("a bad body answered %d: %s", e.Status, e.Msg)
	}
	if !utf8.ValidString(e.Msg) || len(e.Msg) > 4096 {
		t.Fatalf("an answer that is no UTF-8 or %d bytes long: %.200q", len(e.Msg), e.Msg)
	}
}

// decodedValid decodes body into v and validates it as the handler does,
// reporting whether both passed; a refusal must be one a bad body may get.
func decodedValid(t *testing.T, body []byte, v any, validate func() *apiError) bool {
	t.Helper()
	if e := decodeJSON(bytes.NewReader(body), fuzzLimit, v); e != nil {
		refused(t, e)
		return false
	}
	if e := validate(); e != nil {
		refused(t, e)
		return false
	}
	return true
}

// acceptedRecipient checks a recipient the validator let through.
func acceptedRecipient(t *testing.T, channel, rec string) {
	t.Helper()
	switch channel {
	case chEmail:
		if len(rec) > 254 || strings.ContainsAny(rec, " \r\n<>\"") || rec != strings.ToLower(rec) {
			t.Fatalf("accepted email recipient %q", rec)
		}
	case chSMS:
		if !strings.HasPrefix(rec, "+") || len(rec) > 18 {
			t.Fatalf("accepted SMS recipient %q is not E.164", rec)
		}
	case chWeCom:
		if !wecom.ValidUserID(rec) || strings.EqualFold(rec, "@all") || strings.Contains(rec, "|") {
			t.Fatalf("accepted WeCom recipient %q is not one person", rec)
		}
	}
}

func FuzzSendRequest(f *testing.F) {
	for _, s := range []string{
		`{"messageType":"EMAIL","templateCode":"notice","recipient":"a@example.com","variables":{"title":"t","content":"c"}}`,
		`{"messageType":"SMS","templateCode":"notice","recipient":"+8613900001234","variables":{"title":"t","content":"c"},"priority":"low","delaySeconds":30}`,
		`{"messageType":"WECOM","templateCode":"notice","recipient":"zhangsan","variables":{"title":"t","content":"c"},"priority":9}`,
		`{"messageType":"WECOM","templateCode":"notice","recipient":"@all","variables":{}}`,
		`{"messageType":"WECOM_ROBOT","templateCode":"notice","recipient":"ops","mentions":["@all","a"],"variables":{}}`,
		`{"messageType":"WECOM","recipient":"u1","media":{"type":"image","url":"https://h.example/a.png","filename":"a.png"}}`,
		`{"messageType":"EMAIL","templateCode":"notice","recipient":"a@example.com","sendAt":"2026-11-29T13:00:00Z","ttlSeconds":60,"callbackUrl":"https://h.example/cb"}`,
		`{"messageType":"EMAIL","templateCode":"notice","recipient":"a@example.com","variables":{"title":"t","content":"c"},"delaySeconds":1e308}`,
		`{"messageType":"SMS","templateCode":"notice","recipient":"+1","sendAt":"2099-01-01T00:00:00Z","priority":9,"callbackUrl":"https://x/y"}`,
		`{"variables":{"a\u0000":"\ud800"}}`, `null`, `{"a":`, "\xff\xfe", `{"delaySeconds":"NaN"}`,
		`{"messageType":1}`, `[]`, `{}`, `{"messageType":"EMAIL"}{}`, "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req SendRequest
		if !decodedValid(t, body, &req, func() *apiError { return req.validate(fuzzLocales, false, fuzzNow) }) {
			return
		}
		acceptedRecipient(t, req.channel, req.Recipient)
		if req.delay < 0 || req.ttl < 0 || len(req.Variables) > maxVariables || len(req.Mentions) > maxMentions {
			t.Fatalf("accepted delay %s, ttl %s, %d variables, %d mentions", req.delay, req.ttl, len(req.Variables), len(req.Mentions))
		}
		if req.CallbackURL != "" && !strings.HasPrefix(req.CallbackURL, "https://") {
			t.Fatalf("accepted callback %q without CALLBACK_ALLOW_HTTP", req.CallbackURL)
		}
	})
}

func FuzzBatchRequest(f *testing.F) {
	for _, s := range []string{
		`{"messageType":"WECOM","templateCode":"notice","recipients":["zhangsan","lisi"],"variables":{"title":"t","content":"c"}}`,
		`{"messageType":"EMAIL","templateCode":"notice","recipients":["a@example.com","A@example.com"],"variables":{}}`,
		`{"messageType":"SMS","templateCode":"notice","recipients":["+8613900001234","+447400123456"],"variables":{}}`,
		`{"messageType":"WECOM","templateCode":"notice","recipients":["@all","a|b"],"variables":{}}`,
		`{"recipients":null}`, `{"recipients":[1,2]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var b BatchRequest
		if !decodedValid(t, body, &b, func() *apiError { return b.validateCommon(fuzzLocales, false, fuzzNow) }) {
			return
		}
		for _, r := range b.Recipients {
			rec, e := normalizeRecipient(b.channel, r)
			if e != nil {
				refused(t, e)
				continue
			}
			acceptedRecipient(t, b.channel, rec)
		}
	})
}

func FuzzVerificationCodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"channel":"email","recipient":"you@example.com","purpose":"login","locale":"en","clientIp":"203.0.113.9"}`,
		`{"channel":"sms","recipient":"+8613900001234","purpose":"login","clientIp":"2001:db8::1"}`,
		`{"channel":"sms","recipient":"+881612345678","purpose":"x"}`,
		`{"channel":"wecom","recipient":"a","purpose":"login"}`,
		`{"channel":"email","recipient":"a+tag@example.com","purpose":"reset_password","clientIp":"not-an-ip"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req VerificationCodeRequest
		if !decodedValid(t, body, &req, func() *apiError { return req.validate(fuzzLocales) }) {
			return
		}
		acceptedRecipient(t, req.Channel, req.Recipient)
		if req.limitAs == "" || (req.Channel == chSMS && req.number.E164 != req.Recipient) {
			t.Fatalf("accepted %+v without what limits count it as", req)
		}
	})
}

func FuzzVerifyRequest(f *testing.F) {
	for _, s := range []string{
		`{"channel":"email","recipient":"you@example.com","purpose":"login","code":"123456"}`,
		`{"channel":"sms","recipient":"+8613900001234","purpose":"login","code":"12"}`,
		`{"channel":"email","recipient":"you@example.com","purpose":"login","code":"１２３４５６"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req VerifyRequest
		if !decodedValid(t, body, &req, req.validate) {
			return
		}
		acceptedRecipient(t, req.Channel, req.Recipient)
		if !codeRE.MatchString(req.Code) {
			t.Fatalf("accepted code %q", req.Code)
		}
	})
}
