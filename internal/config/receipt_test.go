package config

import (
	"strings"
	"testing"
)

func TestReceiptsSettings(t *testing.T) {
	secret := strings.Repeat("s", 32)
	tests := []struct {
		name    string
		env     map[string]string
		api     bool
		wantErr string // "" = loads
	}{
		{"all unset", nil, true, ""},
		{"https public URL", map[string]string{"PUBLIC_BASE_URL": "https://msg.example.com/", "RECEIPT_SECRET": secret}, true, ""},
		{"http on loopback", map[string]string{"PUBLIC_BASE_URL": "http://127.0.0.1:8080", "RECEIPT_SECRET": secret}, false, ""},
		{"http on localhost", map[string]string{"PUBLIC_BASE_URL": "http://localhost:8080", "RECEIPT_SECRET": secret}, false, ""},
		{"http elsewhere", map[string]string{"PUBLIC_BASE_URL": "http://msg.example.com", "RECEIPT_SECRET": secret}, true, "PUBLIC_BASE_URL"},
		{"query in public URL", map[string]string{"PUBLIC_BASE_URL": "https://msg.example.com/?t=1", "RECEIPT_SECRET": secret}, true, "PUBLIC_BASE_URL"},
		{"bounce domain without secret", map[string]string{"MAIL_BOUNCE_DOMAIN": "bounce.example.com"}, false, "RECEIPT_SECRET"},
		{"short secret", map[string]string{"MAIL_BOUNCE_DOMAIN": "bounce.example.com", "RECEIPT_SECRET": "short"}, true, "RECEIPT_SECRET"},
		{"receiver without domain", map[string]string{"BOUNCE_SMTP_ADDR": ":2525"}, true, "BOUNCE_SMTP_ADDR"},
		{"short hook token", map[string]string{"SMS_ALIYUN_RECEIPT_TOKEN": "abc"}, true, "SMS_ALIYUN_RECEIPT_TOKEN"},
		{"DKIM half set", map[string]string{"DKIM_DOMAIN": "example.com"}, false, "DKIM_DOMAIN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lookup := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			var err error
			if tt.api {
				_, l := LoadAPI(withDefaults(lookup))
				err = receiptErr(l.Errs())
			} else {
				_, l := LoadConsumer(withDefaults(lookup))
				err = receiptErr(l.Errs())
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("want no error, got %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("want an error naming %s, got %v", tt.wantErr, err)
			}
		})
	}
}

// withDefaults gives the settings every program needs (an API key, the
// code secret) unless env has them.
func withDefaults(env func(string) (string, bool)) func(string) (string, bool) {
	return func(k string) (string, bool) {
		if v, ok := env(k); ok {
			return v, ok
		}
		switch k {
		case "API_KEYS":
			return "backend:" + strings.Repeat("k", 32), true
		case "CODE_SECRET":
			return strings.Repeat("c", 32), true
		}
		return "", false
	}
}

// receiptErr keeps the errors about the settings this test is about.
func receiptErr(err error) error {
	if err == nil {
		return nil
	}
	for _, name := range []string{"PUBLIC_BASE_URL", "RECEIPT_SECRET", "MAIL_BOUNCE_DOMAIN", "BOUNCE_SMTP_ADDR", "SMS_ALIYUN_RECEIPT_TOKEN", "SMS_TENCENT_RECEIPT_TOKEN", "DKIM_"} {
		if strings.Contains(err.Error(), name) {
			return err
		}
	}
	return nil
}

// A Twilio send carries StatusCallback only when PUBLIC_BASE_URL is set;
// the API reads TWILIO_AUTH_TOKEN for the hook's signature.
func TestTwilioStatusCallbackFollowsPublicBaseURL(t *testing.T) {
	for _, tt := range []struct{ name, base, want string }{
		{"unset", "", ""},
		{"set", "https://msg.example.com/", "https://msg.example.com/hooks/sms/twilio"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"RECEIPT_SECRET": strings.Repeat("s", 32), "TWILIO_AUTH_TOKEN": "tok"}
			if tt.base != "" {
				env["PUBLIC_BASE_URL"] = tt.base
			}
			lookup := withDefaults(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
			c, l := LoadConsumer(lookup)
			if err := receiptErr(l.Errs()); err != nil {
				t.Fatal(err)
			}
			if c.SMS.Twilio.StatusCallback != tt.want {
				t.Fatalf("StatusCallback %q, want %q", c.SMS.Twilio.StatusCallback, tt.want)
			}
			a, _ := LoadAPI(lookup)
			if a.Receipts.TwilioAuthToken != "tok" {
				t.Fatalf("the API's TwilioAuthToken %q, want tok", a.Receipts.TwilioAuthToken)
			}
		})
	}
}
