package sms

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/provider"
)

// Test-side TC3-HMAC-SHA256, written from Tencent's "signature method v3"
// document and driven by the SignedHeaders the request declares, not from
// the production code.
type tc3Input struct {
	method, uri, query string
	headers            map[string]string // as received
	signed             []string          // lower-case names, in SignedHeaders order
	payload            []byte
	timestamp          int64
	service            string
	secretKey          string
}

func tc3DocCanonicalHash(in tc3Input) string {
	var canonicalHeaders strings.Builder
	for _, h := range in.signed {
		// "key and value lower-cased, leading and trailing spaces removed"
		canonicalHeaders.WriteString(h + ":" + strings.ToLower(strings.TrimSpace(in.headers[h])) + "\n")
	}
	p := sha256.Sum256(in.payload)
	cr := in.method + "\n" + in.uri + "\n" + in.query + "\n" + canonicalHeaders.String() + "\n" +
		strings.Join(in.signed, ";") + "\n" + hex.EncodeToString(p[:])
	sum := sha256.Sum256([]byte(cr))
	return hex.EncodeToString(sum[:])
}

func tc3DocSignature(in tc3Input) string {
	hm := func(key []byte, msg string) []byte {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(msg))
		return m.Sum(nil)
	}
	date := time.Unix(in.timestamp, 0).UTC().Format(time.DateOnly)
	sts := "TC3-HMAC-SHA256\n" + strconv.FormatInt(in.timestamp, 10) + "\n" + date + "/" + in.service + "/tc3_request\n" + tc3DocCanonicalHash(in)
	secretDate := hm([]byte("TC3"+in.secretKey), date)
	secretService := hm(secretDate, in.service)
	secretSigning := hm(secretService, "tc3_request")
	return hex.EncodeToString(hm(secretSigning, sts))
}

// The worked example of cloud.tencent.com/document/api/213/30654. Its
// SecretKey is printed as 32 asterisks, and that literal string is the key:
// it reproduces the published SecretDate, SecretSigning and Signature.
var tc3Vector = struct {
	secretID, secretKey, host, action, payload string
	timestamp                                  int64
	canonicalHash, signature, authorization    string
}{
	secretID:      "AKID" + strings.Repeat("*", 32),
	secretKey:     strings.Repeat("*", 32),
	host:          "cvm.tencentcloudapi.com",
	action:        "DescribeInstances",
	payload:       `{"Limit": 1, "Filters": [{"Values": ["\u672a\u547d\u540d"], "Name": "instance-name"}]}`,
	timestamp:     1551113065,
	canonicalHash: "7019a55be8395899b900fb5564e4200d984910f34794a27cb3fb7d10ff6a1e84",
	signature:     "10b1a37a7301a02ca19a647ad722d5e43b4b3cff309d421d85b46093f6ab6c4f",
	authorization: "TC3-HMAC-SHA256 Credential=AKID" + strings.Repeat("*", 32) + "/2019-02-25/cvm/tc3_request, " +
		"SignedHeaders=content-type;host;x-tc-action, Signature=10b1a37a7301a02ca19a647ad722d5e43b4b3cff309d421d85b46093f6ab6c4f",
}

func TestTencentKnownAnswer(t *testing.T) {
	t.Parallel()
	v := tc3Vector
	in := tc3Input{
		method: "POST", uri: "/",
		headers:   map[string]string{"content-type": "application/json; charset=utf-8", "host": v.host, "x-tc-action": v.action},
		signed:    []string{"content-type", "host", "x-tc-action"},
		payload:   []byte(v.payload),
		timestamp: v.timestamp, service: "cvm", secretKey: v.secretKey,
	}
	require.Equal(t, v.canonicalHash, tc3DocCanonicalHash(in), "test-side canonical request")
	require.Equal(t, v.signature, tc3DocSignature(in), "test-side verifier")
	require.Equal(t, v.authorization,
		tc3Authorization(v.secretID, v.secretKey, "cvm", v.host, "/", v.action, v.timestamp, []byte(v.payload)), "production signer")
}

// The credential date is the UTC date: 1551113065 is already 2019-02-26 in
// Beijing, and a local-time date fails every night.
func TestTencentCredentialDateIsUTC(t *testing.T) {
	t.Parallel()
	auth := tc3Authorization("id", "key", "sms", "sms.tencentcloudapi.com", "/", "SendSms", 1551113065, []byte("{}"))
	require.Contains(t, auth, "Credential=id/2019-02-25/sms/tc3_request,")
}

const (
	tencentID    = "AKIDtestSecretId"
	tencentKey   = "testSecretKey"
	tencentAppID = "1400006666"
)

var tc3AuthRe = regexp.MustCompile(`^TC3-HMAC-SHA256 Credential=([^/]+)/(\d{4}-\d{2}-\d{2})/([a-z]+)/tc3_request, SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$`)

// tencentServer is a fake sms.tencentcloudapi.com.
type tencentServer struct {
	mu    sync.Mutex
	last  map[string]any
	calls int
}

func tencentError(code, msg string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		_, _ = fmt.Fprintf(w, `{"Response":{"Error":{"Code":%q,"Message":%q},"RequestId":"ed93f3cb-f35e-473f-b9f3-0d451b8b79c6"}}`, code, msg)
	}
}

func tencentStatus(code, msg, serial string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		_, _ = fmt.Fprintf(w, `{"Response":{"SendStatusSet":[{"SerialNo":%q,"PhoneNumber":"+8613900001234","Fee":1,"SessionContext":"task-7f3a","Code":%q,"Message":%q,"IsoCode":"CN"}],"RequestId":"a0aabda6-cf91-4f3e-a81f-9198114a2279"}}`, serial, code, msg)
	}
}

func (s *tencentServer) handler(reply func(http.ResponseWriter)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.calls++
		s.mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		fail := func(code, msg string) { tencentError(code, msg)(w) }
		ts, tsErr := strconv.ParseInt(r.Header.Get("X-TC-Timestamp"), 10, 64)
		m := tc3AuthRe.FindStringSubmatch(r.Header.Get("Authorization"))
		switch {
		case r.Method != http.MethodPost || r.URL.Path != "/":
			fail("InvalidAction", "The action requested is invalid.")
			return
		case r.Header.Get("Content-Type") != "application/json; charset=utf-8":
			fail("InvalidParameter", "content-type")
			return
		case r.Header.Get("X-TC-Action") != "SendSms":
			fail("InvalidAction", "The action requested is invalid.")
			return
		case r.Header.Get("X-TC-Version") != "2021-01-11":
			fail("NoSuchVersion", "The requested version does not exist.")
			return
		case r.Header.Get("X-TC-Region") != "ap-guangzhou":
			fail("InvalidParameterValue", "region")
			return
		case tsErr != nil || time.Since(time.Unix(ts, 0)).Abs() > 5*time.Minute:
			fail("AuthFailure.SignatureExpire", "Signature expired.")
			return
		case m == nil:
			fail("AuthFailure.InvalidAuthorization", "Authorization is invalid.")
			return
		case m[1] != tencentID:
			fail("AuthFailure.SecretIdNotFound", "The SecretId is not found.")
			return
		case m[2] != time.Unix(ts, 0).UTC().Format(time.DateOnly) || m[3] != "sms":
			fail("AuthFailure.InvalidAuthorization", "Credential scope does not match.")
			return
		case !strings.Contains(";"+m[4]+";", ";content-type;") || !strings.Contains(";"+m[4]+";", ";host;"):
			fail("AuthFailure.InvalidAuthorization", "content-type and host must be signed.")
			return
		}
		headers := map[string]string{"host": r.Host}
		for k := range r.Header {
			headers[strings.ToLower(k)] = r.Header.Get(k)
		}
		want := tc3DocSignature(tc3Input{method: r.Method, uri: r.URL.EscapedPath(), query: r.URL.RawQuery, headers: headers,
			signed: strings.Split(m[4], ";"), payload: body, timestamp: ts, service: "sms", secretKey: tencentKey})
		if !hmac.Equal([]byte(want), []byte(m[5])) {
			fail("AuthFailure.SignatureFailure", "The provided credentials could not be validated. Please check your signature is correct.")
			return
		}
		var req map[string]any
		if err := json.Unmarshal(body, &req); err != nil {
			fail("FailedOperation.FailResolvePacket", "Failed to resolve the request packet.")
			return
		}
		if req["SmsSdkAppId"] != tencentAppID || req["SignName"] == nil || req["TemplateId"] == nil || req["PhoneNumberSet"] == nil {
			fail("MissingParameter", "A required parameter is missing.")
			return
		}
		s.mu.Lock()
		s.last = req
		s.mu.Unlock()
		reply(w)
	}
}

func setupTencent(t *testing.T, key string, reply func(http.ResponseWriter)) (provider.SMSSender, *tencentServer) {
	t.Helper()
	fs := &tencentServer{}
	srv := httptest.NewServer(fs.handler(reply))
	t.Cleanup(srv.Close)
	s, err := New(NameTencent, Config{Tencent: TencentConfig{
		SecretID: tencentID, SecretKey: key, SdkAppID: tencentAppID, SignName: "腾讯云",
		Templates: map[string]TencentTemplate{"verify_code": {ID: "1234567", Params: []string{"code", "ttlMinutes"}}},
		Endpoint:  srv.URL + "/",
	}}, zap.NewNop(), nil)
	require.NoError(t, err)
	return s, fs
}

func TestTencentSend(t *testing.T) {
	t.Parallel()
	const serial = "5000:1045710669157053657849499619"
	ok := tencentStatus("Ok", "send success", serial)
	for _, tc := range []struct {
		name      string
		key       string
		msg       func(provider.SMS) provider.SMS
		reply     func(http.ResponseWriter)
		wantErr   *wantErr
		wantCalls int
	}{
		{name: "Ok", reply: ok},
		{name: "per-number daily limit", reply: tencentStatus("LimitExceeded.PhoneNumberDailyLimit", "the number of SMS messages sent from a single mobile number every day exceeds the upper limit", ""),
			wantErr: &wantErr{class: provider.Throttled, code: "LimitExceeded.PhoneNumberDailyLimit"}},
		{name: "per-number frequency limit", reply: tencentStatus("LimitExceeded.DeliveryFrequencyLimit", "frequency limit", ""),
			wantErr: &wantErr{class: provider.Throttled, code: "LimitExceeded.DeliveryFrequencyLimit"}},
		{name: "app daily limit", reply: tencentError("LimitExceeded.AppDailyLimit", "daily limit"), wantErr: &wantErr{class: provider.Throttled, code: "LimitExceeded.AppDailyLimit"}},
		{name: "api rate limit", reply: tencentError("RequestLimitExceeded", "Your current request times equals to `20` in a second"), wantErr: &wantErr{class: provider.Throttled, code: "RequestLimitExceeded"}},
		{name: "template not approved", reply: tencentStatus("FailedOperation.TemplateIncorrectOrUnapproved", "template is not approved or request content does not match the approved template content", ""),
			wantErr: &wantErr{class: provider.Permanent, code: "FailedOperation.TemplateIncorrectOrUnapproved"}},
		{name: "signature not approved", reply: tencentStatus("FailedOperation.SignatureIncorrectOrUnapproved", "signature is not approved", ""),
			wantErr: &wantErr{class: provider.Permanent, code: "FailedOperation.SignatureIncorrectOrUnapproved"}},
		{name: "blacklisted number", reply: tencentStatus("FailedOperation.PhoneNumberInBlacklist", "in blacklist", ""),
			wantErr: &wantErr{class: provider.Permanent, code: "FailedOperation.PhoneNumberInBlacklist"}},
		{name: "incorrect number", reply: tencentStatus("InvalidParameterValue.IncorrectPhoneNumber", "incorrect number format", ""),
			wantErr: &wantErr{class: provider.Permanent, code: "InvalidParameterValue.IncorrectPhoneNumber"}},
		{name: "sdk app id", reply: tencentError("UnauthorizedOperation.SmsSdkAppIdVerifyFail", "SmsSdkAppId verify fail"),
			wantErr: &wantErr{class: provider.Permanent, code: "UnauthorizedOperation.SmsSdkAppIdVerifyFail"}},
		{name: "per-number internal timeout", reply: tencentStatus("InternalError.Timeout", "timeout", ""), wantErr: &wantErr{class: provider.Transient, code: "InternalError.Timeout"}},
		{name: "internal error", reply: tencentError("InternalError", "An internal error has occurred."), wantErr: &wantErr{class: provider.Transient, code: "InternalError"}},
		{name: "sig verification is not transient", reply: tencentError("InternalError.SigVerificationFail", "sig verification failed"),
			wantErr: &wantErr{class: provider.Permanent, code: "InternalError.SigVerificationFail"}},
		{name: "unknown code", reply: tencentError("Mystery.Code", "?"), wantErr: &wantErr{class: provider.Transient, code: "Mystery.Code"}},
		{name: "bad gateway", reply: respond(502, "<html>bad gateway</html>"), wantErr: &wantErr{class: provider.Transient, code: "502"}},
		{name: "200 not JSON", reply: respond(200, "<html>"), wantErr: &wantErr{class: provider.Transient, code: "200"}},
		{name: "empty status set", reply: respond(200, `{"Response":{"SendStatusSet":[],"RequestId":"r"}}`), wantErr: &wantErr{class: provider.Transient, code: "bad_response"}},
		// Proves the fake checks signatures.
		{name: "wrong secret key", key: "wrong", reply: ok, wantErr: &wantErr{class: provider.Permanent, code: "AuthFailure.SignatureFailure"}},
		{name: "unmapped template", msg: func(m provider.SMS) provider.SMS { m.Template = "notice"; return m }, reply: ok,
			wantErr: &wantErr{class: provider.Permanent, code: "template_not_mapped"}, wantCalls: -1},
		{name: "missing template variable", msg: func(m provider.SMS) provider.SMS { m.Params = map[string]string{"code": testCode}; return m }, reply: ok,
			wantErr: &wantErr{class: provider.Permanent, code: "template_param_missing"}, wantCalls: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key := tencentKey
			if tc.key != "" {
				key = tc.key
			}
			s, fs := setupTencent(t, key, tc.reply)
			m := verifySMS()
			if tc.msg != nil {
				m = tc.msg(m)
			}
			rc, err := s.SendSMS(context.Background(), m)
			fs.mu.Lock()
			defer fs.mu.Unlock()
			if tc.wantCalls < 0 {
				require.Zero(t, fs.calls, "nothing must be sent")
			} else {
				require.Equal(t, 1, fs.calls)
			}
			if tc.wantErr != nil {
				pe := requireProviderError(t, err, NameTencent, *tc.wantErr)
				switch tc.wantErr.code {
				case "template_not_mapped":
					require.Contains(t, pe.Message, "TENCENT_SMS_TEMPLATES")
				case "template_param_missing":
					require.Contains(t, pe.Message, `"ttlMinutes"`)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, provider.Receipt{Provider: NameTencent, MessageID: serial}, rc)
			require.Equal(t, []any{testTo}, fs.last["PhoneNumberSet"])
			require.Equal(t, "1234567", fs.last["TemplateId"])
			require.Equal(t, "腾讯云", fs.last["SignName"])
			require.Equal(t, []any{testCode, "5"}, fs.last["TemplateParamSet"], "positional, in the configured order")
			require.Equal(t, m.TaskID, fs.last["SessionContext"])
		})
	}
}

// A template without variables still sends an (empty) list.
func TestTencentTemplateWithoutParams(t *testing.T) {
	t.Parallel()
	fs := &tencentServer{}
	srv := httptest.NewServer(fs.handler(tencentStatus("Ok", "send success", "s1")))
	t.Cleanup(srv.Close)
	s, err := New(NameTencent, Config{Tencent: TencentConfig{
		SecretID: tencentID, SecretKey: tencentKey, SdkAppID: tencentAppID, SignName: "x",
		Templates: map[string]TencentTemplate{"welcome": {ID: "42"}}, Endpoint: srv.URL,
	}}, zap.NewNop(), nil)
	require.NoError(t, err)
	rc, err := s.SendSMS(context.Background(), provider.SMS{To: testTo, Template: "welcome", TaskID: "t"})
	require.NoError(t, err)
	require.Equal(t, "s1", rc.MessageID)
	require.Equal(t, []any{}, fs.last["TemplateParamSet"])
}
