package redact_test

import (
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
			want:    `wecom: transient failure upload: Post "http://127.0.0.1:4711/cgi-bin/media/upload?[redacted]": context deadline exceeded`},
		{name: "the token fetch's URL", in: `Get "https://qyapi.weixin.qq.com/cgi-bin/gettoken?corpid=ww1&corpsecret=corp-s3cret-x": EOF`,
			secrets: []string{"corp-s3cret-x"}},
		{name: "a robot's webhook", in: "post https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=robot-key-42 failed",
			secrets: []string{"robot-key-42"}, want: "post https://qyapi.weixin.qq.com/cgi-bin/webhook/send?[redacted] failed"},
		{name: "a fragment", in: "see https://h/cb#access_token=frag-tok-99 now", secrets: []string{"frag-tok-99"}},
		{name: "a callbackUrl's query and password", in: `Post "https://u:pw-77@hooks.example/cb?token=cb-tok-1": dial tcp: refused`,
			secrets: []string{"pw-77", "cb-tok-1"}},
		{name: "a relative request echoed by a vendor", in: "bad request: GET /?AccessKeyId=LTAI&Signature=c2lnbmF0dXJl%3D&PhoneNumbers=139",
			secrets: []string{"c2lnbmF0dXJl"}},
		{name: "parameters in free text", in: "refused: access_token=tok-abc, corpsecret=sec-def; key=value stays",
			secrets: []string{"tok-abc", "sec-def"}, want: "refused: access_token=[redacted], corpsecret=[redacted]; key=value stays"},
		{name: "JSON", in: `answer {"errcode":0,"access_token":"json-tok-1","expires_in":7200,"key":"k-2"}`,
			secrets: []string{"json-tok-1", "k-2"}},
		{name: "an Authorization header", in: "header Authorization: Bearer eyJhbGciOi.payload.sig1 sent",
			secrets: []string{"eyJhbGciOi.payload.sig1"}},
		{name: "TC3 signing", in: "TC3-HMAC-SHA256 Credential=AKIDcred/2025-01-01/sms/tc3_request, SignedHeaders=content-type;host, Signature=5d41402abc4b2a76",
			secrets: []string{"AKIDcred", "5d41402abc4b2a76"}},
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

func BenchmarkTextNothingToRemove(b *testing.B) {
	s := "wecom: transient failure connection: context deadline exceeded"
	for b.Loop() {
		_ = redact.Text(s)
	}
}
