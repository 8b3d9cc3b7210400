package sms

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // Aliyun's signature version 1.0 is HMAC-SHA1 by specification
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/msgpulse/msgpulse/internal/provider"
)

// Aliyun Dysmsapi SendSms, RPC style, signature version 1.0 (HMAC-SHA1).
// https://help.aliyun.com/document_detail/101343.html
type aliyun struct {
	httpSender
	cfg AliyunConfig
}

func newAliyun(c AliyunConfig, timeout time.Duration) *aliyun {
	return &aliyun{httpSender: newHTTPSender(NameAliyun, timeout), cfg: c}
}

// aliyunPercentEncode is the POP encoding: RFC 3986, everything but
// A-Z a-z 0-9 - _ . ~ becomes %XX (upper-case hex), UTF-8 bytes. It differs
// from url.QueryEscape in space (%20, not +).
func aliyunPercentEncode(s string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) * 3)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

// aliyunCanonicalQuery sorts params by name (byte order) and joins the
// encoded pairs; it is also the query string that is sent.
func aliyunCanonicalQuery(params map[string]string) string {
	keys := make([]string, 0, len(params))
	for k := range params {
		if k != "Signature" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(aliyunPercentEncode(k))
		b.WriteByte('=')
		b.WriteString(aliyunPercentEncode(params[k]))
	}
	return b.String()
}

// aliyunSign returns the base64 HMAC-SHA1 signature of a GET request.
func aliyunSign(secret string, canonicalQuery string) string {
	stringToSign := "GET&" + aliyunPercentEncode("/") + "&" + aliyunPercentEncode(canonicalQuery)
	mac := hmac.New(sha1.New, []byte(secret+"&"))
	mac.Write([]byte(stringToSign))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// aliyunPhone converts E.164 to what PhoneNumbers takes: the national
// number for mainland China, country code and number without "+" elsewhere.
func aliyunPhone(e164 string) string {
	if n, ok := strings.CutPrefix(e164, "+86"); ok {
		return n
	}
	return strings.TrimPrefix(e164, "+")
}

func (a *aliyun) SendSMS(ctx context.Context, m provider.SMS) (provider.Receipt, error) {
	code, err := registered(a.name, m, a.cfg.Templates, "ALIYUN_SMS_TEMPLATES", "SMS_123456")
	if err != nil {
		return provider.Receipt{}, err
	}
	params := map[string]string{
		"AccessKeyId":      a.cfg.AccessKeyID,
		"Action":           "SendSms",
		"Format":           "JSON",
		"PhoneNumbers":     aliyunPhone(m.To),
		"RegionId":         a.cfg.RegionID,
		"SignName":         a.cfg.SignName,
		"SignatureMethod":  "HMAC-SHA1",
		"SignatureNonce":   rand.Text(),
		"SignatureVersion": "1.0",
		"TemplateCode":     code,
		"Timestamp":        a.now().UTC().Format("2006-01-02T15:04:05Z"),
		"Version":          "2017-05-25",
	}
	if len(m.Params) > 0 {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false) // the template gets the characters, not \u003c
		if err := enc.Encode(m.Params); err != nil {
			return provider.Receipt{}, &provider.Error{Provider: a.name, Class: provider.Permanent, Code: "encode", Err: err}
		}
		params["TemplateParam"] = strings.TrimSpace(buf.String())
	}
	if m.TaskID != "" {
		params["OutId"] = m.TaskID // echoed in delivery receipts
	}
	q := aliyunCanonicalQuery(params)
	target := strings.TrimRight(a.cfg.Endpoint, "?") + "?Signature=" + aliyunPercentEncode(aliyunSign(a.cfg.AccessKeySecret, q)) + "&" + q
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		// No %w of err: its text would hold the URL, and the URL the code.
		return provider.Receipt{}, &provider.Error{Provider: a.name, Class: provider.Permanent, Code: "request", Message: "cannot build request to ALIYUN_SMS_ENDPOINT"}
	}
	req.Header.Set("Accept", "application/json")
	rep, err := a.do(req)
	if err != nil {
		return provider.Receipt{}, err
	}
	var r struct {
		Code      string
		Message   string
		BizID     string `json:"BizId"`
		RequestID string `json:"RequestId"`
	}
	if json.Unmarshal(rep.body, &r) != nil || r.Code == "" {
		return provider.Receipt{}, a.newErr(classifyStatus(rep.status), strconv.Itoa(rep.status), "unexpected reply: "+http.StatusText(rep.status), m)
	}
	if r.Code == "OK" && rep.status/100 == 2 {
		return provider.Receipt{Provider: a.name, MessageID: r.BizID}, nil
	}
	msg := r.Message
	if r.RequestID != "" {
		msg += " (RequestId " + r.RequestID + ")"
	}
	return provider.Receipt{}, a.newErr(classifyAliyun(r.Code, rep.status), r.Code, msg, m)
}

// Aliyun codes whose class is not what their namespace or name suggests.
var aliyunCodes = map[string]provider.Class{
	// Throttling.
	"isv.BUSINESS_LIMIT_CONTROL": provider.Throttled, // per-number minute/hour/day limit
	"isv.DAY_LIMIT_CONTROL":      provider.Throttled,
	"isv.MONTH_LIMIT_CONTROL":    provider.Throttled,
	"Throttling":                 provider.Throttled,
	"Throttling.User":            provider.Throttled,
	"Throttling.Api":             provider.Throttled,
	// "LIMIT" in the name, but the content or request is at fault.
	"isv.BLACK_KEY_CONTROL_LIMIT": provider.Permanent, // forbidden keyword in the parameters
	"isv.PARAM_LENGTH_LIMIT":      provider.Permanent,
	"isv.MOBILE_COUNT_OVER_LIMIT": provider.Permanent,
	// Vendor side.
	"isp.SYSTEM_ERROR":   provider.Transient,
	"isp.GATEWAY_ERROR":  provider.Transient,
	"ServiceUnavailable": provider.Transient,
	"InternalError":      provider.Transient,
	"UnknownError":       provider.Transient,
	// A nonce collision: the next attempt has a fresh nonce.
	"SignatureNonceUsed": provider.Transient,
	// Credentials, signing and account: no retry can fix these.
	"InvalidAccessKeyId.NotFound": provider.Permanent,
	"InvalidAccessKeyId.Inactive": provider.Permanent,
	"SignatureDoesNotMatch":       provider.Permanent,
	"IncompleteSignature":         provider.Permanent,
	"InvalidTimeStamp.Expired":    provider.Permanent, // clock skew: fix NTP
	"isp.RAM_PERMISSION_DENY":     provider.Permanent,
	"Forbidden.RAM":               provider.Permanent,
	"MissingParameter":            provider.Permanent,
	"InvalidParameter":            provider.Permanent,
}

// classifyAliyun maps a Dysmsapi Code. Rules, in order: the table above;
// any other code containing LIMIT is throttling; isv.* ("the caller's
// side": number, template, signature, balance, account) is permanent;
// isp.* ("the platform's side") is transient; otherwise the HTTP status
// decides, and an unknown code on a 2xx is transient, so an unknown failure
// is retried (bounded by MAX_RETRIES) rather than lost.
func classifyAliyun(code string, status int) provider.Class {
	if c, ok := aliyunCodes[code]; ok {
		return c
	}
	switch {
	case strings.Contains(strings.ToUpper(code), "LIMIT"):
		return provider.Throttled
	case strings.HasPrefix(code, "isv."):
		return provider.Permanent
	case strings.HasPrefix(code, "isp."):
		return provider.Transient
	case strings.HasPrefix(code, "Throttling"):
		return provider.Throttled
	}
	return classifyStatus(status)
}

// unmappedTemplate is the error for a template the vendor has no id for:
// it names the variable an operator must set.
// registered is what a vendor that sends only registered templates checks
// before anything leaves: an E.164 number, and the vendor's template for
// m's (templates, which envVar maps; example shows an entry).
func registered[T any](name string, m provider.SMS, templates map[string]T, envVar, example string) (T, error) {
	tpl, ok := templates[m.Template]
	switch {
	case !e164(m.To):
		return tpl, badRecipient(name, m.To)
	case !ok:
		return tpl, unmappedTemplate(name, m.Template, envVar, example)
	}
	return tpl, nil
}

func unmappedTemplate(name, template, envVar, example string) *provider.Error {
	if template == "" {
		return &provider.Error{Provider: name, Class: provider.Permanent, Code: "template_required",
			Message: "message has no template, and " + name + " sends only registered templates; map one in " + envVar}
	}
	return &provider.Error{Provider: name, Class: provider.Permanent, Code: "template_not_mapped",
		Message: "template " + strconv.Quote(template) + " has no " + name + " template: add " + template + "=" + example + " to " + envVar}
}
