package sms

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/msgpulse/msgpulse/internal/provider"
)

// Tencent Cloud SMS SendSms, API 2021-01-11, signed with TC3-HMAC-SHA256.
// https://cloud.tencent.com/document/api/382/55981 (SendSms)
// https://cloud.tencent.com/document/api/213/30654 (signature v3)
const (
	tencentService     = "sms"
	tencentAction      = "SendSms"
	tencentVersion     = "2021-01-11"
	tencentAlgorithm   = "TC3-HMAC-SHA256"
	tencentContentType = "application/json; charset=utf-8"
	tencentSigned      = "content-type;host;x-tc-action"
)

type tencent struct {
	httpSender
	cfg  TencentConfig
	host string // as sent in Host, and signed
	path string
}

func newTencent(c TencentConfig, timeout time.Duration) (*tencent, error) {
	u, err := url.Parse(c.Endpoint)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("sms provider tencent: TENCENT_SMS_ENDPOINT %q is not an absolute URL", c.Endpoint)
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	return &tencent{httpSender: newHTTPSender(NameTencent, timeout), cfg: c, host: strings.ToLower(u.Host), path: path}, nil
}

// tencentRequest is the SendSms body.
type tencentRequest struct {
	PhoneNumberSet   []string
	SmsSdkAppID      string `json:"SmsSdkAppId"`
	SignName         string
	TemplateID       string `json:"TemplateId"`
	TemplateParamSet []string
	SessionContext   string `json:",omitempty"`
}

// tc3Authorization returns the Authorization header for a POST whose
// canonical headers are content-type, host and x-tc-action.
func tc3Authorization(secretID, secretKey, service, host, path, action string, ts int64, payload []byte) string {
	sum := sha256.Sum256(payload)
	canonical := strings.Join([]string{
		http.MethodPost,
		path,
		"", // no query string
		"content-type:" + tencentContentType + "\n" + "host:" + host + "\n" + "x-tc-action:" + strings.ToLower(action) + "\n",
		tencentSigned,
		hex.EncodeToString(sum[:]),
	}, "\n")
	date := time.Unix(ts, 0).UTC().Format("2006-01-02") // UTC, not local: see the v3 docs' midnight warning
	scope := date + "/" + service + "/tc3_request"
	crSum := sha256.Sum256([]byte(canonical))
	stringToSign := tencentAlgorithm + "\n" + strconv.FormatInt(ts, 10) + "\n" + scope + "\n" + hex.EncodeToString(crSum[:])
	key := hmacSHA256([]byte("TC3"+secretKey), date)
	key = hmacSHA256(key, service)
	key = hmacSHA256(key, "tc3_request")
	sig := hex.EncodeToString(hmacSHA256(key, stringToSign))
	return tencentAlgorithm + " Credential=" + secretID + "/" + scope + ", SignedHeaders=" + tencentSigned + ", Signature=" + sig
}

func hmacSHA256(key []byte, msg string) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(msg))
	return mac.Sum(nil)
}

func (t *tencent) SendSMS(ctx context.Context, m provider.SMS) (provider.Receipt, error) {
	tpl, err := registered(t.name, m, t.cfg.Templates, "TENCENT_SMS_TEMPLATES", "1234567:var1|var2")
	if err != nil {
		return provider.Receipt{}, err
	}
	values := make([]string, len(tpl.Params))
	for i, p := range tpl.Params {
		v, ok := m.Params[p]
		if !ok {
			return provider.Receipt{}, &provider.Error{Provider: t.name, Class: provider.Permanent, Code: "template_param_missing",
				Message: "template " + strconv.Quote(m.Template) + " needs variable " + strconv.Quote(p) + " (order from TENCENT_SMS_TEMPLATES)"}
		}
		values[i] = v
	}
	body, err := json.Marshal(tencentRequest{
		PhoneNumberSet:   []string{m.To},
		SmsSdkAppID:      t.cfg.SdkAppID,
		SignName:         t.cfg.SignName,
		TemplateID:       tpl.ID,
		TemplateParamSet: values,
		SessionContext:   m.TaskID, // echoed in status callbacks
	})
	if err != nil {
		return provider.Receipt{}, &provider.Error{Provider: t.name, Class: provider.Permanent, Code: "encode", Err: err}
	}
	ts := t.now().Unix()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.cfg.Endpoint, bytes.NewReader(body))
	if err != nil {
		return provider.Receipt{}, &provider.Error{Provider: t.name, Class: provider.Permanent, Code: "request", Err: err}
	}
	req.Host = t.host
	req.Header.Set("Authorization", tc3Authorization(t.cfg.SecretID, t.cfg.SecretKey, tencentService, t.host, t.path, tencentAction, ts, body))
	req.Header.Set("Content-Type", tencentContentType)
	req.Header.Set("X-TC-Action", tencentAction)
	req.Header.Set("X-TC-Version", tencentVersion)
	req.Header.Set("X-TC-Timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("X-TC-Region", t.cfg.Region)
	rep, err := t.do(req)
	if err != nil {
		return provider.Receipt{}, err
	}
	var r struct {
		Response struct {
			Error *struct {
				Code    string
				Message string
			}
			SendStatusSet []struct {
				SerialNo    string
				PhoneNumber string
				Code        string
				Message     string
			}
			RequestID string `json:"RequestId"`
		}
	}
	if json.Unmarshal(rep.body, &r) != nil || rep.status/100 != 2 {
		return provider.Receipt{}, t.newErr(classifyStatus(rep.status), strconv.Itoa(rep.status), "unexpected reply: "+http.StatusText(rep.status), m)
	}
	resp := r.Response
	suffix := ""
	if resp.RequestID != "" {
		suffix = " (RequestId " + resp.RequestID + ")"
	}
	if resp.Error != nil {
		return provider.Receipt{}, t.newErr(classifyTencent(resp.Error.Code), resp.Error.Code, resp.Error.Message+suffix, m)
	}
	if len(resp.SendStatusSet) != 1 {
		return provider.Receipt{}, t.newErr(provider.Transient, "bad_response", fmt.Sprintf("expected 1 send status, got %d%s", len(resp.SendStatusSet), suffix), m)
	}
	st := resp.SendStatusSet[0]
	if st.Code != "Ok" {
		return provider.Receipt{}, t.newErr(classifyTencent(st.Code), st.Code, st.Message+suffix, m)
	}
	return provider.Receipt{Provider: t.name, MessageID: st.SerialNo}, nil
}

// Tencent codes whose class their namespace does not give.
var tencentCodes = map[string]provider.Class{
	// InternalError.* that mean "your request is malformed" or "your
	// clock is off", which the next attempt repeats.
	"InternalError.SigVerificationFail":      provider.Permanent,
	"InternalError.SigFieldMissing":          provider.Permanent,
	"InternalError.RestApiInterfaceNotExist": provider.Permanent,
	"InternalError.RequestTimeException":     provider.Permanent,
	// We send one number per request; this can only be a bug.
	"LimitExceeded.PhoneNumberCountLimit": provider.Permanent,
	// Common codes without a namespace we can read.
	"ResourceUnavailable":  provider.Transient,
	"ResourceInsufficient": provider.Transient,
	"ServiceUnavailable":   provider.Transient,
}

// classifyTencent maps a Tencent error code (top-level Response.Error or a
// SendStatusSet entry). Rules, in order: the table above; LimitExceeded*
// and RequestLimitExceeded* are throttling (per-number and per-app send
// limits, API rate limits); InternalError* is transient; AuthFailure*,
// UnauthorizedOperation*, InvalidParameter*, MissingParameter*,
// FailedOperation* (template, signature, blacklist, sensitive words,
// balance), UnsupportedOperation*, InvalidAction, NoSuchVersion,
// ActionOffline, IpInBlacklist, IpNotInWhitelist, InvalidRequest and
// DryRunOperation are permanent; anything else is transient, so an unknown
// failure is retried (bounded by MAX_RETRIES) rather than lost.
func classifyTencent(code string) provider.Class {
	if c, ok := tencentCodes[code]; ok {
		return c
	}
	ns, _, _ := strings.Cut(code, ".")
	switch ns {
	case "LimitExceeded", "RequestLimitExceeded":
		return provider.Throttled
	case "InternalError":
		return provider.Transient
	case "AuthFailure", "UnauthorizedOperation", "InvalidParameter", "InvalidParameterValue", "MissingParameter",
		"FailedOperation", "UnsupportedOperation", "InvalidAction", "NoSuchVersion", "NoSuchProduct", "ActionOffline",
		"IpInBlacklist", "IpNotInWhitelist", "InvalidRequest", "DryRunOperation", "UnknownParameter":
		return provider.Permanent
	}
	return provider.Transient
}
