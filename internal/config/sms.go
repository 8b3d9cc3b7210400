package config

import (
	"errors"
	"time"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/provider/sms"
)

// loadSMS reads the SMS vendor settings the consumer needs. Only the
// selected vendors' (SMS_PROVIDER, SMS_PROVIDER_FALLBACK) settings are
// required; a missing one fails naming its variable.
func loadSMS(l *envconf.Loader) sms.Config {
	web := []string{"http", "https"}
	c := sms.Config{
		Provider: l.Enum("SMS_PROVIDER", sms.NameLog, sms.Names, "SMS vendor; log prints messages to stdout and sends nothing (development only)"),
		Fallback: l.Enum("SMS_PROVIDER_FALLBACK", "", sms.Names, "SMS vendor used while SMS_PROVIDER's circuit breaker is open (empty = none)"),
		Timeout:  l.Duration("SMS_TIMEOUT", sms.DefaultTimeout, 100*time.Millisecond, 2*time.Minute, "bound on one SMS vendor request, connect to last byte"),
	}
	c.Webhook = sms.WebhookConfig{
		URL:    l.URL("SMS_WEBHOOK_URL", "", web, "webhook provider: URL that receives each SMS as signed JSON"),
		Secret: l.Secret("SMS_WEBHOOK_SECRET", "", "webhook provider: HMAC-SHA256 key for X-Msgpulse-Signature"),
	}
	c.Aliyun = sms.AliyunConfig{
		AccessKeyID:     l.String("ALIYUN_ACCESS_KEY_ID", "", "aliyun provider: AccessKey ID"),
		AccessKeySecret: l.Secret("ALIYUN_ACCESS_KEY_SECRET", "", "aliyun provider: AccessKey secret"),
		SignName:        l.String("ALIYUN_SMS_SIGN_NAME", "", "aliyun provider: approved signature (SignName)"),
		Templates:       templates(l, "ALIYUN_SMS_TEMPLATES", "aliyun provider: msgpulse template to Aliyun TemplateCode, e.g. verify_code=SMS_123,notice=SMS_456", sms.ParseAliyunTemplates),
		Endpoint:        l.URL("ALIYUN_SMS_ENDPOINT", sms.DefaultAliyunEndpoint, web, "aliyun provider: Dysmsapi endpoint"),
		RegionID:        l.String("ALIYUN_REGION", sms.DefaultAliyunRegion, "aliyun provider: RegionId"),
	}
	c.Tencent = sms.TencentConfig{
		SecretID:  l.String("TENCENT_SECRET_ID", "", "tencent provider: SecretId"),
		SecretKey: l.Secret("TENCENT_SECRET_KEY", "", "tencent provider: SecretKey"),
		SdkAppID:  l.String("TENCENT_SMS_SDK_APP_ID", "", "tencent provider: SmsSdkAppId"),
		SignName:  l.String("TENCENT_SMS_SIGN_NAME", "", "tencent provider: approved signature (SignName)"),
		Templates: templates(l, "TENCENT_SMS_TEMPLATES", "tencent provider: msgpulse template to TemplateId and parameter order, e.g. verify_code=1234567:code|ttlMinutes;notice=7654321:title|content", sms.ParseTencentTemplates),
		Endpoint:  l.URL("TENCENT_SMS_ENDPOINT", sms.DefaultTencentEndpoint, web, "tencent provider: SMS API endpoint"),
		Region:    l.String("TENCENT_REGION", sms.DefaultTencentRegion, "tencent provider: X-TC-Region"),
	}
	c.Twilio = sms.TwilioConfig{
		AccountSID:          l.String("TWILIO_ACCOUNT_SID", "", "twilio provider: Account SID"),
		AuthToken:           l.Secret("TWILIO_AUTH_TOKEN", "", "twilio provider: Auth Token"),
		From:                l.String("TWILIO_FROM", "", "twilio provider: sender number (E.164); or set TWILIO_MESSAGING_SERVICE_SID"),
		MessagingServiceSID: l.String("TWILIO_MESSAGING_SERVICE_SID", "", "twilio provider: Messaging Service SID, used instead of TWILIO_FROM"),
		BaseURL:             l.URL("TWILIO_BASE_URL", sms.DefaultTwilioBaseURL, web, "twilio provider: API base URL"),
	}
	c.Breaker.FailureThreshold = l.Int("BREAKER_FAILURES", 5, 1, 1000, "consecutive transient failures that open an SMS vendor's circuit breaker")
	c.Breaker.OpenFor = l.Duration("BREAKER_OPEN_FOR", 30*time.Second, time.Second, time.Hour, "how long an open breaker refuses a vendor before probing it again")

	// Cross-variable checks (what the selected vendors require). A variable
	// a getter already rejected is not reported twice.
	for _, p := range c.Problems() {
		if !failed(l, p.Var) {
			l.Fail(p.Var, p.Value, "%s", p.Msg)
		}
	}
	return c
}

// templates reads a template mapping variable with parse.
func templates[T any](l *envconf.Loader, name, help string, parse func(string) (map[string]T, error)) map[string]T {
	s := l.String(name, "", help)
	m, err := parse(s)
	if err != nil {
		l.Fail(name, s, "%v", err)
		return nil
	}
	return m
}

// failed reports whether an error was already recorded for name.
func failed(l *envconf.Loader, name string) bool {
	err := l.Errs()
	if err == nil {
		return false
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var ee *envconf.Error
		if errors.As(e, &ee) && ee.Name == name {
			return true
		}
	}
	return false
}
