package redact_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/redact"
)

func TestTextTakesSecretsOut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		secrets  []string // none may be left
		want     string   // when set, the whole result
	}{
		{name: "Go's url.Error of a WeCom upload (issue 37)",
			in:      `wecom: transient failure upload: Post "http://127.0.0.1:4711/cgi-bin/media/upload?access_token=44a3cae2b1&type=image": context deadline exceeded`,
			secrets: []string{"44a3cae2b1"},
			want:    `wecom: transient failure upload: Post "http://127.0.0.1:4711/cgi-bin/[redacted]": context deadline exceeded`},
		{name: "the token fetch's URL", in: `Get "https://qyapi.weixin.qq.com/cgi-bin/gettoken?corpid=ww1&corpsecret=corp-s3cret-x": EOF`,
			secrets: []string{"corp-s3cret-x"}},
		{name: "a robot's webhook", in: "post https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=robot-key-42 failed",
			secrets: []string{"robot-key-42"}, want: "post https://qyapi.weixin.qq.com/cgi-bin/[redacted] failed"},
		{name: "a fragment", in: "see https://h/cb#access_token=frag-tok-99 now", secrets: []string{"frag-tok-99"}},
		{name: "a callbackUrl's query and password", in: `Post "https://u:pw-77@hooks.example/cb?token=cb-tok-1": dial tcp: refused`,
			secrets: []string{"pw-77", "cb-tok-1"}},
		{name: "a relative request echoed by a vendor", in: "bad request: GET /?AccessKeyId=LTAI&Signature=c2lnbmF0dXJl%3D&PhoneNumbers=139",
			secrets: []string{"c2lnbmF0dXJl"}},
		{name: "an SMS hook's path token (issue 45)", in: "no such endpoint: POST /hooks/sms/aliyun/hook-tok-123456 (from 10.0.0.1)",
			secrets: []string{"hook-tok-123456"}, want: "no such endpoint: POST /hooks/sms/aliyun/[redacted] (from 10.0.0.1)"},
		{name: "a Twilio signature header (issue 45)", in: "header X-Twilio-Signature: dHdpbGlvLXNpZw== refused",
			secrets: []string{"dHdpbGlvLXNpZw=="}},
		{name: "parameters in free text", in: "refused: access_token=tok-abc, corpsecret=sec-def; key=value stays",
			secrets: []string{"tok-abc", "sec-def"}, want: "refused: access_token=[redacted], corpsecret=[redacted]; key=value stays"},
		{name: "JSON", in: `answer {"errcode":0,"access_token":"json-tok-1","expires_in":7200,"key":"k-2"}`,
			secrets: []string{"json-tok-1", "k-2"}},
		{name: "an Authorization header", in: "header Authorization: Bearer eyJhbGciOi.payload.sig1 sent",
			secrets: []string{"eyJhbGciOi.payload.sig1"}},
		{name: "TC3 signing", in: "TC3-HMAC-SHA256 Credential=AKIDcred/2025-01-01/sms/tc3_request, SignedHeaders=content-type;host, Signature=5d41402abc4b2a76",
			secrets: []string{"AKIDcred", "5d41402abc4b2a76"}},
		// Issue 43's gaps.
		{name: "JSON with blanks before the colon", in: `answer {"access_token" : "json-tok-2", "corpsecret"	:"sec-3"}`,
			secrets: []string{"json-tok-2", "sec-3"}},
		{name: "JSON with a newline and a bare value", in: "{\n  \"token\"\n  :\n  81723645,\n  \"api_key\": null2x9}",
			secrets: []string{"81723645", "null2x9"}},
		{name: "a Slack-style hook's path", in: `Post "https://hooks.slack.example/services/T0AB/B0CD/xoxb-path-secret": dial tcp: refused`,
			secrets: []string{"xoxb-path-secret", "B0CD"}, want: `Post "https://hooks.slack.example/services/[redacted]": dial tcp: refused`},
		{name: "a callback URL's path token", in: "callback failed url=https://backend.example/cb/tok-in-path-7/status",
			secrets: []string{"tok-in-path-7"}, want: "callback failed url=https://backend.example/cb/[redacted]"},
		{name: "a bare URL with a path", in: "https://hooks.example/x/path-secret-8", secrets: []string{"path-secret-8"},
			want: "https://hooks.example/x/[redacted]"},
		{name: "one segment stays", in: "listening on http://127.0.0.1:8080/console", want: "listening on http://127.0.0.1:8080/console"},
		{name: "Authorization: Token", in: "header Authorization: Token tok-header-9 sent", secrets: []string{"tok-header-9"}},
		{name: "X-Api-Key", in: "request had X-Api-Key: xak-secret-10 and more", secrets: []string{"xak-secret-10"}},
		{name: "x-api-key, lower case, quoted", in: `headers map[x-api-key:[xak-11]]`, secrets: []string{"xak-11"}},
		{name: "Authorization with no scheme", in: "Authorization: raw-cred-12", secrets: []string{"raw-cred-12"}},
		{name: "nothing secret", in: "wecom: transient failure connection: context deadline exceeded", want: "wecom: transient failure connection: context deadline exceeded"},
		{name: "words that only look like names", in: "routing key=wecom.normal, monkey=3, tokens: 5", want: "routing key=wecom.normal, monkey=3, tokens: 5"},
	} {
		got := redact.Text(tc.in)
		for _, s := range tc.secrets {
			require.NotContains(t, got, s, tc.name)
		}
		if tc.want != "" {
			require.Equal(t, tc.want, got, tc.name)
		}
		require.Equal(t, got, redact.Text(got), "%s: a second pass changes nothing", tc.name)
	}
}

// A known secret put anywhere, in any shape a secret travels in, never
// comes out (issue 43): random text before and after, random shapes,
// random blanks.
func TestTextNeverLetsAPlacedSecretThrough(t *testing.T) {
	t.Parallel()
	const secret = "Zq9sEcReT7x"
	shapes := []func(r *rand.Rand) string{
		func(r *rand.Rand) string { return "https://h.example/a/" + secret },
		func(r *rand.Rand) string { return "https://h.example/a/b/" + secret + "/c" },
		func(r *rand.Rand) string { return "http://h.example:81/p?x=1&key=" + secret },
		func(r *rand.Rand) string { return "https://h.example/cb#t=" + secret },
		func(r *rand.Rand) string { return "https://u:" + secret + "@h.example/" },
		func(r *rand.Rand) string { return "access_token=" + secret },
		func(r *rand.Rand) string { return `"corpsecret"` + blanks(r) + ":" + blanks(r) + `"` + secret + `"` },
		func(r *rand.Rand) string { return `"token"` + blanks(r) + ":" + blanks(r) + secret },
		func(r *rand.Rand) string { return "Authorization:" + blanks(r) + "Bearer " + secret },
		func(r *rand.Rand) string { return "Authorization:" + blanks(r) + "Token " + secret },
		func(r *rand.Rand) string { return "authorization:" + blanks(r) + "Basic " + secret },
		func(r *rand.Rand) string { return "X-Api-Key:" + blanks(r) + secret },
		func(r *rand.Rand) string { return "x-api-key:" + blanks(r) + secret },
		func(r *rand.Rand) string { return "Signature=" + secret },
	}
	words := []string{"error", "post", `"`, "'", "(", ")", ":", ",", "dial tcp", "EOF", "\n", "=", "failed:", "url", "<", ">", "{", "}"}
	r := rand.New(rand.NewPCG(43, 43))
	for i := range 20_000 {
		var b strings.Builder
		for range r.IntN(4) {
			b.WriteString(words[r.IntN(len(words))])
			b.WriteString(blanks(r))
		}
		b.WriteString(sep(r)) // a name stands alone: "tcpaccess_token=" is another word
		b.WriteString(shapes[r.IntN(len(shapes))](r))
		for range r.IntN(4) {
			b.WriteString(sep(r))
			b.WriteString(words[r.IntN(len(words))])
		}
		in := b.String()
		if got := redact.Text(in); strings.Contains(got, secret) {
			t.Fatalf("try %d: %q came out as %q", i, in, got)
		}
	}
}

// blanks is 0 to 2 spaces or tabs.
func blanks(r *rand.Rand) string { return strings.Repeat([]string{" ", "\t"}[r.IntN(2)], r.IntN(3)) }

// sep ends a secret's text as the shapes' own text ends: a blank, a quote,
// a comma, a bracket.
func sep(r *rand.Rand) string { return []string{" ", `"`, "'", ",", ">", "\n"}[r.IntN(6)] }

func BenchmarkTextNothingToRemove(b *testing.B) {
	s := "wecom: transient failure connection: context deadline exceeded"
	for b.Loop() {
		_ = redact.Text(s)
	}
}

// The token of an unsubscribe link is a secret wherever its path is
// written, with or without a scheme and host: echo's "no such endpoint"
// and "method not allowed" name the request's path.
func TestTextTakesUnsubscribeTokensOut(t *testing.T) {
	t.Parallel()
	const tok = "ZW1haWwKc2hvcAphQGIuYwoxODAw.c2lnbmF0dXJl"
	for _, tc := range []struct{ name, in, want string }{
		{"echo's 405", "method PUT not allowed on /unsubscribe/" + tok, "method PUT not allowed on /unsubscribe/[redacted]"},
		{"echo's 404, a segment more", "no such endpoint: GET /unsubscribe/" + tok + "/x", "no such endpoint: GET /unsubscribe/[redacted]"},
		{"quoted", `path "/unsubscribe/` + tok + `" refused`, `path "/unsubscribe/[redacted]" refused`},
		{"absolute", "List-Unsubscribe: <https://msg.example.com/unsubscribe/" + tok + ">", "List-Unsubscribe: <https://msg.example.com/unsubscribe/[redacted]>"},
		{"the route pattern stays", "route=/unsubscribe/:token", "route=/unsubscribe/:token"},
		{"other paths stay", "GET /api/messages/t-1", "GET /api/messages/t-1"},
	} {
		got := redact.Text(tc.in)
		require.NotContains(t, got, tok, tc.name)
		require.Equal(t, tc.want, got, tc.name)
		require.Equal(t, got, redact.Text(got), "%s: a second pass changes nothing", tc.name)
	}
}
