package sms

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/msgpulse/msgpulse/internal/breaker"
	"github.com/msgpulse/msgpulse/internal/envconf"
)

// Provider names, as used in SMS_PROVIDER, Receipt.Provider and
// Error.Provider.
const (
	NameLog     = "log"
	NameWebhook = "webhook"
	NameAliyun  = "aliyun"
	NameTencent = "tencent"
	NameTwilio  = "twilio"
)

// Names lists every provider name New accepts.
var Names = []string{NameLog, NameWebhook, NameAliyun, NameTencent, NameTwilio}

// Defaults for zero Config fields.
const (
	DefaultTimeout         = 10 * time.Second
	DefaultAliyunEndpoint  = "https://dysmsapi.aliyuncs.com/"
	DefaultAliyunRegion    = "cn-hangzhou"
	DefaultTencentEndpoint = "https://sms.tencentcloudapi.com/"
	DefaultTencentRegion   = "ap-guangzhou"
	DefaultTwilioBaseURL   = "https://api.twilio.com"
)

// Config selects and configures the SMS vendors. Zero fields take the
// defaults above (Provider defaults to "log").
type Config struct {
	Provider string        // primary vendor, one of Names
	Fallback string        // vendor used while the primary's breaker is open; "" for none
	Timeout  time.Duration // bound on one vendor request, connect to last byte
	Breaker  breaker.Config
	Webhook  WebhookConfig
	Aliyun   AliyunConfig
	Tencent  TencentConfig
	Twilio   TwilioConfig
}

// WebhookConfig configures the generic signed-JSON webhook.
type WebhookConfig struct {
	URL    string
	Secret string // HMAC-SHA256 key; the receiver checks with VerifyWebhookSignature
}

// AliyunConfig configures Aliyun (Alibaba Cloud) Dysmsapi.
type AliyunConfig struct {
	AccessKeyID     string
	AccessKeySecret string
	SignName        string
	// Templates maps msgpulse template codes to Aliyun TemplateCodes
	// (verify_code -> SMS_123456): Aliyun sends only registered templates.
	Templates map[string]string
	Endpoint  string // default DefaultAliyunEndpoint; tests point it at httptest
	RegionID  string // default DefaultAliyunRegion
}

// TencentConfig configures Tencent Cloud SMS (API 2021-01-11).
type TencentConfig struct {
	SecretID  string
	SecretKey string
	SdkAppID  string
	SignName  string
	// Templates maps msgpulse template codes to a Tencent template id and
	// the order of its parameters: Tencent takes them as a positional list.
	Templates map[string]TencentTemplate
	Endpoint  string // default DefaultTencentEndpoint
	Region    string // default DefaultTencentRegion
}

// TencentTemplate is one registered Tencent template.
type TencentTemplate struct {
	ID     string
	Params []string // msgpulse variable names, in the template's {1}, {2}... order
}

// TwilioConfig configures Twilio's Messages API.
type TwilioConfig struct {
	AccountSID          string
	AuthToken           string
	From                string // sender number; ignored when MessagingServiceSID is set
	MessagingServiceSID string
	BaseURL             string // default DefaultTwilioBaseURL
	// StatusCallback, when set, is the URL Twilio posts each message's
	// status changes to (PUBLIC_BASE_URL + /hooks/sms/twilio, see
	// internal/receipt/smshook); "" sends none.
	StatusCallback string
}

// ConfigError is one invalid setting, named by its environment variable so
// internal/config can report it through envconf.Loader.Fail.
type ConfigError struct {
	Var   string
	Value string // never a secret
	Msg   string
}

func (e *ConfigError) Error() string { return e.Var + ": " + e.Msg }

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Provider == "" {
		c.Provider = NameLog
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	c.Breaker = c.Breaker.WithDefaults()
	if c.Aliyun.Endpoint == "" {
		c.Aliyun.Endpoint = DefaultAliyunEndpoint
	}
	if c.Aliyun.RegionID == "" {
		c.Aliyun.RegionID = DefaultAliyunRegion
	}
	if c.Tencent.Endpoint == "" {
		c.Tencent.Endpoint = DefaultTencentEndpoint
	}
	if c.Tencent.Region == "" {
		c.Tencent.Region = DefaultTencentRegion
	}
	if c.Twilio.BaseURL == "" {
		c.Twilio.BaseURL = DefaultTwilioBaseURL
	}
	return c
}

// Validate checks the settings of the selected vendors (primary and
// fallback); settings of unselected vendors are ignored. The error joins one
// *ConfigError per problem.
func (c Config) Validate() error {
	errs := make([]error, 0, 4)
	for _, p := range c.Problems() {
		errs = append(errs, p)
	}
	return errors.Join(errs...)
}

// Problems is Validate's list, for callers that report each variable.
func (c Config) Problems() []*ConfigError {
	c = c.WithDefaults()
	var ps []*ConfigError
	add := func(v, val, format string, args ...any) {
		ps = append(ps, &ConfigError{Var: v, Value: val, Msg: fmt.Sprintf(format, args...)})
	}
	if !slices.Contains(Names, c.Provider) {
		add("SMS_PROVIDER", c.Provider, "unknown provider; want one of %s", strings.Join(Names, ", "))
	}
	switch {
	case c.Fallback == "":
	case !slices.Contains(Names, c.Fallback):
		add("SMS_PROVIDER_FALLBACK", c.Fallback, "unknown provider; want one of %s or empty", strings.Join(Names, ", "))
	case c.Fallback == c.Provider:
		add("SMS_PROVIDER_FALLBACK", c.Fallback, "must differ from SMS_PROVIDER")
	case c.Fallback == NameLog:
		// A fallback that prints instead of sending would report lost
		// messages as delivered exactly when the real vendor is down.
		add("SMS_PROVIDER_FALLBACK", c.Fallback, "log sends nothing and cannot be a fallback")
	}
	if c.Timeout < 0 {
		add("SMS_TIMEOUT", c.Timeout.String(), "must be positive")
	}
	if c.Breaker.FailureThreshold < 0 {
		add("BREAKER_FAILURES", fmt.Sprint(c.Breaker.FailureThreshold), "must be positive")
	}
	if c.Breaker.OpenFor < 0 {
		add("BREAKER_OPEN_FOR", c.Breaker.OpenFor.String(), "must be positive")
	}
	if c.Breaker.HalfOpenProbes < 0 {
		add("BREAKER_HALF_OPEN_PROBES", fmt.Sprint(c.Breaker.HalfOpenProbes), "must be positive")
	}
	for _, name := range []string{c.Provider, c.Fallback} {
		if name == "" {
			continue
		}
		ps = append(ps, c.vendorProblems(name)...)
	}
	return ps
}

// vendorNeeds is what one vendor needs to send anything: the settings it
// requires, the endpoint to check, and (when it has one) what a missing
// template map should say.
type vendorNeeds struct {
	required    [][2]string // variable, value
	endpoint    [2]string   // variable, value; checked only when set
	templates   string      // the variable; empty when the vendor has none
	example     string      // a template map's example
	templatesOK bool        // false when the vendor needs a template map and has none
}

func (c Config) needs(name string) (vendorNeeds, bool) {
	switch name {
	case NameWebhook:
		return vendorNeeds{required: [][2]string{{"SMS_WEBHOOK_URL", c.Webhook.URL}, {"SMS_WEBHOOK_SECRET", c.Webhook.Secret}},
			endpoint: [2]string{"SMS_WEBHOOK_URL", c.Webhook.URL}, templatesOK: true}, true
	case NameAliyun:
		return vendorNeeds{required: [][2]string{{"ALIYUN_ACCESS_KEY_ID", c.Aliyun.AccessKeyID},
			{"ALIYUN_ACCESS_KEY_SECRET", c.Aliyun.AccessKeySecret}, {"ALIYUN_SMS_SIGN_NAME", c.Aliyun.SignName}},
			endpoint: [2]string{"ALIYUN_SMS_ENDPOINT", c.Aliyun.Endpoint}, templates: "ALIYUN_SMS_TEMPLATES",
			example: "verify_code=SMS_123456", templatesOK: len(c.Aliyun.Templates) > 0}, true
	case NameTencent:
		return vendorNeeds{required: [][2]string{{"TENCENT_SECRET_ID", c.Tencent.SecretID}, {"TENCENT_SECRET_KEY", c.Tencent.SecretKey},
			{"TENCENT_SMS_SDK_APP_ID", c.Tencent.SdkAppID}, {"TENCENT_SMS_SIGN_NAME", c.Tencent.SignName}},
			endpoint: [2]string{"TENCENT_SMS_ENDPOINT", c.Tencent.Endpoint}, templates: "TENCENT_SMS_TEMPLATES",
			example: "verify_code=1234567:code|ttlMinutes", templatesOK: len(c.Tencent.Templates) > 0}, true
	case NameTwilio:
		return vendorNeeds{required: [][2]string{{"TWILIO_ACCOUNT_SID", c.Twilio.AccountSID}, {"TWILIO_AUTH_TOKEN", c.Twilio.AuthToken}},
			endpoint: [2]string{"TWILIO_BASE_URL", c.Twilio.BaseURL}, templatesOK: true}, true
	}
	return vendorNeeds{}, false
}

// vendorProblems checks what the named vendor needs to send anything.
func (c Config) vendorProblems(name string) []*ConfigError {
	c = c.WithDefaults()
	n, ok := c.needs(name)
	if !ok {
		return nil
	}
	var ps []*ConfigError
	for _, r := range n.required {
		if strings.TrimSpace(r[1]) == "" {
			ps = append(ps, &ConfigError{Var: r[0], Msg: "required when SMS provider " + name + " is selected"})
		}
	}
	if !n.templatesOK {
		ps = append(ps, &ConfigError{Var: n.templates, Msg: "required when SMS provider " + name + " is selected (e.g. " + n.example + ")"})
	}
	if name == NameTwilio && c.Twilio.From == "" && c.Twilio.MessagingServiceSID == "" {
		ps = append(ps, &ConfigError{Var: "TWILIO_FROM", Msg: "TWILIO_FROM or TWILIO_MESSAGING_SERVICE_SID is required when SMS provider twilio is selected"})
	}
	// The webhook's URL is checked only once it is given (its absence was
	// said above); the vendors' endpoints have defaults.
	if n.endpoint[1] != "" {
		if err := checkHTTPURL(n.endpoint[1]); err != nil {
			ps = append(ps, &ConfigError{Var: n.endpoint[0], Value: n.endpoint[1], Msg: err.Error()})
		}
	}
	return ps
}

func checkHTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return errors.New("not an absolute http(s) URL")
	}
	return nil
}

// ParseAliyunTemplates parses ALIYUN_SMS_TEMPLATES:
// "verify_code=SMS_123456,notice=SMS_654321".
func ParseAliyunTemplates(s string) (map[string]string, error) {
	ms, err := envconf.Pairs(s, ",", "template", "template=TemplateCode, e.g. verify_code=SMS_123456")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, m := range ms {
		out[m.Key] = m.Value
	}
	return out, nil
}

// ParseTencentTemplates parses TENCENT_SMS_TEMPLATES:
// "verify_code=1234567:code|ttlMinutes;notice=7654321:title|content". A
// template without variables is just "welcome=1234567".
func ParseTencentTemplates(s string) (map[string]TencentTemplate, error) {
	ms, err := envconf.Pairs(s, ";", "template", "template=TemplateId:var1|var2, e.g. verify_code=1234567:code|ttlMinutes")
	if err != nil {
		return nil, err
	}
	out := map[string]TencentTemplate{}
	for _, m := range ms {
		item, k, v := m.Item, m.Key, m.Value
		id, vars, _ := strings.Cut(v, ":")
		id = strings.TrimSpace(id)
		if id == "" || strings.Trim(id, "0123456789") != "" {
			return nil, fmt.Errorf("%q: Tencent TemplateId %q must be digits", item, id)
		}
		t := TencentTemplate{ID: id}
		if vars = strings.TrimSpace(vars); vars != "" {
			for p := range strings.SplitSeq(vars, "|") {
				p = strings.TrimSpace(p)
				if p == "" {
					return nil, fmt.Errorf("%q: empty variable name", item)
				}
				if slices.Contains(t.Params, p) {
					return nil, fmt.Errorf("%q: variable %q listed twice", item, p)
				}
				t.Params = append(t.Params, p)
			}
		}
		out[k] = t
	}
	return out, nil
}
