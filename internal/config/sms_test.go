package config

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/provider/sms"
)

func setupSMS(t *testing.T, env map[string]string) (sms.Config, *envconf.Loader) {
	t.Helper()
	l := envconf.New(envconf.FromMap(env))
	return loadSMS(l), l
}

func aliyunEnv() map[string]string {
	return map[string]string{
		"SMS_PROVIDER":             "aliyun",
		"ALIYUN_ACCESS_KEY_ID":     "LTAI5tExample",
		"ALIYUN_ACCESS_KEY_SECRET": "shh-very-secret",
		"ALIYUN_SMS_SIGN_NAME":     "msgpulse",
		"ALIYUN_SMS_TEMPLATES":     "verify_code=SMS_123,notice=SMS_456",
	}
}

func with(env map[string]string, kv ...string) map[string]string {
	for i := 0; i+1 < len(kv); i += 2 {
		env[kv[i]] = kv[i+1]
	}
	return env
}

func TestLoadSMS(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		env     map[string]string
		check   func(t *testing.T, c sms.Config)
		wantErr string // first error, naming the variable
	}{
		{name: "defaults", env: map[string]string{}, check: func(t *testing.T, c sms.Config) {
			require.Equal(t, "log", c.Provider)
			require.Empty(t, c.Fallback)
			require.Equal(t, 10*time.Second, c.Timeout)
			require.Equal(t, 5, c.Breaker.FailureThreshold)
			require.Equal(t, 30*time.Second, c.Breaker.OpenFor)
			require.Equal(t, sms.DefaultAliyunEndpoint, c.Aliyun.Endpoint)
			require.Equal(t, "cn-hangzhou", c.Aliyun.RegionID)
			require.Equal(t, sms.DefaultTencentEndpoint, c.Tencent.Endpoint)
			require.Equal(t, "ap-guangzhou", c.Tencent.Region)
			require.Equal(t, sms.DefaultTwilioBaseURL, c.Twilio.BaseURL)
			require.NoError(t, c.Validate())
		}},
		{name: "valid aliyun", env: with(aliyunEnv(), "SMS_TIMEOUT", "5s", "BREAKER_FAILURES", "3", "BREAKER_OPEN_FOR", "1m", "ALIYUN_REGION", "ap-southeast-1"),
			check: func(t *testing.T, c sms.Config) {
				require.Equal(t, "aliyun", c.Provider)
				require.Equal(t, sms.AliyunConfig{
					AccessKeyID: "LTAI5tExample", AccessKeySecret: "shh-very-secret", SignName: "msgpulse",
					Templates: map[string]string{"verify_code": "SMS_123", "notice": "SMS_456"},
					Endpoint:  sms.DefaultAliyunEndpoint, RegionID: "ap-southeast-1",
				}, c.Aliyun)
				require.Equal(t, 5*time.Second, c.Timeout)
				require.Equal(t, 3, c.Breaker.FailureThreshold)
				require.Equal(t, time.Minute, c.Breaker.OpenFor)
			}},
		{name: "valid tencent with twilio fallback", env: map[string]string{
			"SMS_PROVIDER": "tencent", "SMS_PROVIDER_FALLBACK": "twilio",
			"TENCENT_SECRET_ID": "AKID", "TENCENT_SECRET_KEY": "k", "TENCENT_SMS_SDK_APP_ID": "1400006666", "TENCENT_SMS_SIGN_NAME": "s",
			"TENCENT_SMS_TEMPLATES": "verify_code=1234567:code|ttlMinutes;notice=7654321:title|content",
			"TWILIO_ACCOUNT_SID":    "AC1", "TWILIO_AUTH_TOKEN": "t", "TWILIO_MESSAGING_SERVICE_SID": "MG1",
		}, check: func(t *testing.T, c sms.Config) {
			require.Equal(t, "twilio", c.Fallback)
			require.Equal(t, sms.TencentTemplate{ID: "1234567", Params: []string{"code", "ttlMinutes"}}, c.Tencent.Templates["verify_code"])
			require.Equal(t, "MG1", c.Twilio.MessagingServiceSID)
		}},
		{name: "missing aliyun secret", env: with(aliyunEnv(), "ALIYUN_ACCESS_KEY_SECRET", ""), wantErr: "ALIYUN_ACCESS_KEY_SECRET: required when SMS provider aliyun is selected"},
		{name: "missing fallback credential", env: with(aliyunEnv(), "SMS_PROVIDER_FALLBACK", "twilio"), wantErr: "TWILIO_ACCOUNT_SID: required"},
		{name: "missing webhook secret", env: map[string]string{"SMS_PROVIDER": "webhook", "SMS_WEBHOOK_URL": "https://hooks.example/sms"}, wantErr: "SMS_WEBHOOK_SECRET: required"},
		{name: "bad aliyun mapping", env: with(aliyunEnv(), "ALIYUN_SMS_TEMPLATES", "verify_code:SMS_123"), wantErr: `ALIYUN_SMS_TEMPLATES="verify_code:SMS_123": "verify_code:SMS_123": want template=TemplateCode`},
		{name: "bad tencent mapping", env: map[string]string{"TENCENT_SMS_TEMPLATES": "verify_code=SMS_1:code"}, wantErr: "TENCENT_SMS_TEMPLATES="},
		{name: "unknown provider", env: map[string]string{"SMS_PROVIDER": "nexmo"}, wantErr: "SMS_PROVIDER="},
		{name: "fallback same as provider", env: with(aliyunEnv(), "SMS_PROVIDER_FALLBACK", "aliyun"), wantErr: "SMS_PROVIDER_FALLBACK=\"aliyun\": must differ"},
		{name: "bad webhook url reported once", env: map[string]string{"SMS_PROVIDER": "webhook", "SMS_WEBHOOK_URL": "not a url", "SMS_WEBHOOK_SECRET": "k"}, wantErr: "SMS_WEBHOOK_URL="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, l := setupSMS(t, tc.env)
			if tc.wantErr != "" {
				require.ErrorContains(t, l.Err(), tc.wantErr)
				require.NotContains(t, l.Errs().Error(), "shh-very-secret")
				return
			}
			require.NoError(t, l.Errs())
			tc.check(t, c)
		})
	}
}

func TestLoadSMSReportsEachVariableOnce(t *testing.T) {
	t.Parallel()
	_, l := setupSMS(t, map[string]string{"SMS_PROVIDER": "webhook", "SMS_WEBHOOK_URL": "ftp://x", "SMS_WEBHOOK_SECRET": "k"})
	require.Equal(t, 1, bytes.Count([]byte(l.Errs().Error()), []byte("SMS_WEBHOOK_URL")))
}

func TestLoadSMSDocumentsSecrets(t *testing.T) {
	t.Parallel()
	_, l := setupSMS(t, map[string]string{})
	secret := map[string]bool{}
	for _, v := range l.Vars() {
		secret[v.Name] = v.Secret
	}
	for _, name := range []string{"SMS_WEBHOOK_SECRET", "ALIYUN_ACCESS_KEY_SECRET", "TENCENT_SECRET_KEY", "TWILIO_AUTH_TOKEN"} {
		require.True(t, secret[name], name)
	}
	for _, name := range []string{
		"SMS_PROVIDER", "SMS_PROVIDER_FALLBACK", "SMS_TIMEOUT", "SMS_WEBHOOK_URL", "ALIYUN_ACCESS_KEY_ID", "ALIYUN_SMS_SIGN_NAME",
		"ALIYUN_SMS_TEMPLATES", "ALIYUN_SMS_ENDPOINT", "ALIYUN_REGION", "TENCENT_SECRET_ID", "TENCENT_SMS_SDK_APP_ID",
		"TENCENT_SMS_SIGN_NAME", "TENCENT_SMS_TEMPLATES", "TENCENT_SMS_ENDPOINT", "TENCENT_REGION", "TWILIO_ACCOUNT_SID",
		"TWILIO_FROM", "TWILIO_MESSAGING_SERVICE_SID", "TWILIO_BASE_URL", "BREAKER_FAILURES", "BREAKER_OPEN_FOR",
	} {
		_, ok := secret[name]
		require.True(t, ok, name)
		require.False(t, secret[name], name)
	}
}
