package sms

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/breaker"
)

func validAliyun() AliyunConfig {
	return AliyunConfig{AccessKeyID: "LTAI-id", AccessKeySecret: "s3cret", SignName: "msgpulse", Templates: map[string]string{"verify_code": "SMS_1"}}
}

func TestConfigProblems(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		cfg      Config
		wantVars []string
	}{
		{"zero is the log provider", Config{}, nil},
		{"unknown provider", Config{Provider: "carrier-pigeon"}, []string{"SMS_PROVIDER"}},
		{"unknown fallback", Config{Provider: NameAliyun, Aliyun: validAliyun(), Fallback: "x"}, []string{"SMS_PROVIDER_FALLBACK"}},
		{"fallback equals primary", Config{Provider: NameAliyun, Aliyun: validAliyun(), Fallback: NameAliyun}, []string{"SMS_PROVIDER_FALLBACK"}},
		{"log cannot be a fallback", Config{Provider: NameAliyun, Aliyun: validAliyun(), Fallback: NameLog}, []string{"SMS_PROVIDER_FALLBACK"}},
		{"negative timeout", Config{Timeout: -time.Second}, []string{"SMS_TIMEOUT"}},
		{"negative breaker", Config{Breaker: breaker.Config{FailureThreshold: -1, OpenFor: -1}}, []string{"BREAKER_FAILURES", "BREAKER_OPEN_FOR"}},
		{"webhook needs url and secret", Config{Provider: NameWebhook}, []string{"SMS_WEBHOOK_URL", "SMS_WEBHOOK_SECRET"}},
		{"webhook url must be http", Config{Provider: NameWebhook, Webhook: WebhookConfig{URL: "ftp://x/", Secret: "k"}}, []string{"SMS_WEBHOOK_URL"}},
		{"aliyun complete", Config{Provider: NameAliyun, Aliyun: validAliyun()}, nil},
		{"aliyun missing everything", Config{Provider: NameAliyun}, []string{"ALIYUN_ACCESS_KEY_ID", "ALIYUN_ACCESS_KEY_SECRET", "ALIYUN_SMS_SIGN_NAME", "ALIYUN_SMS_TEMPLATES"}},
		{"aliyun bad endpoint", Config{Provider: NameAliyun, Aliyun: func() AliyunConfig { a := validAliyun(); a.Endpoint = "dysmsapi"; return a }()}, []string{"ALIYUN_SMS_ENDPOINT"}},
		{"tencent missing everything", Config{Provider: NameTencent}, []string{"TENCENT_SECRET_ID", "TENCENT_SECRET_KEY", "TENCENT_SMS_SDK_APP_ID", "TENCENT_SMS_SIGN_NAME", "TENCENT_SMS_TEMPLATES"}},
		{"twilio needs from or service", Config{Provider: NameTwilio, Twilio: TwilioConfig{AccountSID: "AC1", AuthToken: "t"}}, []string{"TWILIO_FROM"}},
		{"twilio with service sid", Config{Provider: NameTwilio, Twilio: TwilioConfig{AccountSID: "AC1", AuthToken: "t", MessagingServiceSID: "MG1"}}, nil},
		{"fallback is validated too", Config{Provider: NameAliyun, Aliyun: validAliyun(), Fallback: NameTwilio}, []string{"TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN", "TWILIO_FROM"}},
		{"unselected vendors are ignored", Config{Provider: NameLog, Aliyun: AliyunConfig{Endpoint: "::bad"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var vars []string
			for _, p := range tc.cfg.Problems() {
				vars = append(vars, p.Var)
				require.NotEmpty(t, p.Msg)
			}
			require.Equal(t, tc.wantVars, vars)
			err := tc.cfg.Validate()
			if tc.wantVars == nil {
				require.NoError(t, err)
				return
			}
			var ce *ConfigError
			require.True(t, errors.As(err, &ce))
			for _, v := range tc.wantVars {
				require.ErrorContains(t, err, v)
			}
		})
	}
}

func TestConfigNeverEchoesSecrets(t *testing.T) {
	t.Parallel()
	cfg := Config{Provider: NameAliyun, Aliyun: AliyunConfig{AccessKeySecret: "very-secret-value"}}
	require.NotContains(t, cfg.Validate().Error(), "very-secret-value")
}

func TestParseAliyunTemplates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		want    map[string]string
		wantErr string
	}{
		{"", map[string]string{}, ""},
		{"verify_code=SMS_123,notice=SMS_456", map[string]string{"verify_code": "SMS_123", "notice": "SMS_456"}, ""},
		{" verify_code = SMS_123 , ", map[string]string{"verify_code": "SMS_123"}, ""},
		{"verify_code", nil, "want template=TemplateCode"},
		{"verify_code=", nil, "want template=TemplateCode"},
		{"=SMS_1", nil, "want template=TemplateCode"},
		{"a=SMS_1,a=SMS_2", nil, "mapped twice"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseAliyunTemplates(tc.in)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestParseTencentTemplates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		want    map[string]TencentTemplate
		wantErr string
	}{
		{"", map[string]TencentTemplate{}, ""},
		{"verify_code=1234567:code|ttlMinutes;notice=7654321:title|content", map[string]TencentTemplate{
			"verify_code": {ID: "1234567", Params: []string{"code", "ttlMinutes"}},
			"notice":      {ID: "7654321", Params: []string{"title", "content"}},
		}, ""},
		{"welcome=111", map[string]TencentTemplate{"welcome": {ID: "111"}}, ""},
		{"welcome=111:", map[string]TencentTemplate{"welcome": {ID: "111"}}, ""},
		{"verify_code=abc:code", nil, "must be digits"},
		{"verify_code=:code", nil, "must be digits"},
		{"verify_code=1:code||x", nil, "empty variable"},
		{"verify_code=1:code|code", nil, "listed twice"},
		{"verify_code", nil, "want template=TemplateId"},
		{"a=1;a=2", nil, "mapped twice"},
		// The Aliyun syntax by mistake: "," is not a separator here.
		{"verify_code=1,notice=2", nil, "must be digits"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseTencentTemplates(tc.in)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		cfg     Config
		out     bool
		wantErr string
	}{
		{NameLog, Config{}, true, ""},
		{NameLog, Config{}, false, "needs a writer"},
		{NameWebhook, Config{Webhook: WebhookConfig{URL: "http://127.0.0.1:1/hook", Secret: "k"}}, false, ""},
		{NameWebhook, Config{}, false, "SMS_WEBHOOK_URL"},
		{NameAliyun, Config{Aliyun: validAliyun()}, false, ""},
		{NameAliyun, Config{}, false, "ALIYUN_ACCESS_KEY_SECRET"},
		{NameTencent, Config{Tencent: TencentConfig{SecretID: "i", SecretKey: "k", SdkAppID: "1400000000", SignName: "s", Templates: map[string]TencentTemplate{"x": {ID: "1"}}}}, false, ""},
		{NameTwilio, Config{Twilio: TwilioConfig{AccountSID: "AC1", AuthToken: "t", From: "+15005550006"}}, false, ""},
		{"nexmo", Config{}, false, "unknown"},
		{NameLog, Config{Timeout: -time.Second}, true, "timeout"},
	} {
		t.Run(tc.name+"/"+tc.wantErr, func(t *testing.T) {
			t.Parallel()
			var w io.Writer
			if tc.out {
				w = &bytes.Buffer{}
			}
			s, err := New(tc.name, tc.cfg, zap.NewNop(), w)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				require.Nil(t, s)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.name, s.Name())
		})
	}
}
