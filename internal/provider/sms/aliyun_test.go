package sms

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/provider"
)

// Test-side Aliyun signing, written from the Dysmsapi signature document
// (its Java sample: URLEncoder, then "+"->"%20", "*"->"%2A", "%7E"->"~"),
// not from the production code.
func aliyunDocEncode(s string) string {
	return strings.NewReplacer("+", "%20", "*", "%2A", "%7E", "~").Replace(url.QueryEscape(s))
}

func aliyunDocStringToSign(q url.Values) string {
	keys := make([]string, 0, len(q))
	for k := range q {
		if k != "Signature" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	pairs := make([]string, len(keys))
	for i, k := range keys {
		pairs[i] = aliyunDocEncode(k) + "=" + aliyunDocEncode(q.Get(k))
	}
	return "GET&" + aliyunDocEncode("/") + "&" + aliyunDocEncode(strings.Join(pairs, "&"))
}

func aliyunDocSignature(q url.Values, secret string) string {
	mac := hmac.New(sha1.New, []byte(secret+"&"))
	mac.Write([]byte(aliyunDocStringToSign(q)))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

func toValues(m map[string]string) url.Values {
	v := url.Values{}
	for k, s := range m {
		v.Set(k, s)
	}
	return v
}

// Known-answer vectors published by Aliyun.
var aliyunVectors = []struct {
	name   string
	params map[string]string
	secret string
	query  string
	sig    string
}{
	{
		// Dysmsapi "HTTP protocol and signature" example (SendSms).
		name: "dysmsapi SendSms",
		params: map[string]string{
			"AccessKeyId": "testId", "Action": "SendSms", "Format": "XML", "OutId": "123",
			"PhoneNumbers": "15300000001", "RegionId": "cn-hangzhou", "SignName": "阿里云短信测试专用",
			"SignatureMethod": "HMAC-SHA1", "SignatureNonce": "45e25e9b-0a6f-4070-8c85-2956eda1b466",
			"SignatureVersion": "1.0", "TemplateCode": "SMS_71390007", "TemplateParam": `{"customer":"test"}`,
			"Timestamp": "2017-07-12T02:42:19Z", "Version": "2017-05-25",
		},
		secret: "testSecret",
		query: "AccessKeyId=testId&Action=SendSms&Format=XML&OutId=123&PhoneNumbers=15300000001&RegionId=cn-hangzhou" +
			"&SignName=%E9%98%BF%E9%87%8C%E4%BA%91%E7%9F%AD%E4%BF%A1%E6%B5%8B%E8%AF%95%E4%B8%93%E7%94%A8" +
			"&SignatureMethod=HMAC-SHA1&SignatureNonce=45e25e9b-0a6f-4070-8c85-2956eda1b466&SignatureVersion=1.0" +
			"&TemplateCode=SMS_71390007&TemplateParam=%7B%22customer%22%3A%22test%22%7D&Timestamp=2017-07-12T02%3A42%3A19Z&Version=2017-05-25",
		sig: "zJDF+Lrzhj/ThnlvIToysFRq6t4=",
	},
	{
		// RPC signature document example (ECS DescribeRegions).
		name: "rpc DescribeRegions",
		params: map[string]string{
			"AccessKeyId": "testid", "Action": "DescribeRegions", "Format": "XML", "SignatureMethod": "HMAC-SHA1",
			"SignatureNonce": "3ee8c1b8-83d3-44af-a94f-4e0ad82fd6cf", "SignatureVersion": "1.0",
			"Timestamp": "2016-02-23T12:46:24Z", "Version": "2014-05-26",
		},
		secret: "testsecret",
		sig:    "OLeaidS1JvxuMvnyHOwuJ+uX5qY=",
	},
}

func TestAliyunKnownAnswer(t *testing.T) {
	t.Parallel()
	for _, v := range aliyunVectors {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			q := aliyunCanonicalQuery(v.params)
			if v.query != "" {
				require.Equal(t, v.query, q)
			}
			require.Equal(t, v.sig, aliyunSign(v.secret, q), "production signer")
			require.Equal(t, v.sig, aliyunDocSignature(toValues(v.params), v.secret), "test-side verifier")
		})
	}
}

func TestAliyunPercentEncode(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"a b": "a%20b", "*": "%2A", "~": "~", "+": "%2B", "/": "%2F", "=&": "%3D%26",
		"-_.": "-_.", "阿": "%E9%98%BF", `{"c":"1"}`: "%7B%22c%22%3A%221%22%7D", "": "",
	} {
		require.Equal(t, want, aliyunPercentEncode(in), in)
		require.Equal(t, aliyunDocEncode(in), aliyunPercentEncode(in), in)
	}
}

func TestAliyunPhone(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"+8613900001234": "13900001234",
		"+85291234567":   "85291234567",
		"+15005550006":   "15005550006",
		"+447700900123":  "447700900123",
	} {
		require.Equal(t, want, aliyunPhone(in), in)
	}
}

const (
	aliyunKeyID  = "LTAI5tTestKeyId"
	aliyunSecret = "testAccessKeySecret"
)

// aliyunServer is a fake Dysmsapi: it checks what the real one checks, in
// the same order, and answers with the real error payloads.
type aliyunServer struct {
	mu     sync.Mutex
	nonces map[string]bool
	last   url.Values
	calls  int
}

func aliyunJSON(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{
		"RequestId": "8E6C9C3B-6C9F-5B7A-9C5E-1A2B3C4D5E6F", "HostId": "dysmsapi.aliyuncs.com", "Code": code, "Message": msg,
	})
}

func (s *aliyunServer) handler(reply func(w http.ResponseWriter)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.calls++
		s.mu.Unlock()
		q := r.URL.Query()
		ts, tsErr := time.Parse("2006-01-02T15:04:05Z", q.Get("Timestamp"))
		for k, want := range map[string]string{
			"Action": "SendSms", "Version": "2017-05-25", "Format": "JSON", "SignatureMethod": "HMAC-SHA1",
			"SignatureVersion": "1.0", "RegionId": "cn-hangzhou",
		} {
			if q.Get(k) != want {
				aliyunJSON(w, 400, "InvalidParameter", fmt.Sprintf("The specified parameter %q is not valid.", k))
				return
			}
		}
		switch {
		case r.Method != http.MethodGet || r.URL.Path != "/":
			aliyunJSON(w, 404, "InvalidAction.NotFound", "Specified api is not found, please check your url and method.")
			return
		case q.Get("AccessKeyId") != aliyunKeyID:
			aliyunJSON(w, 404, "InvalidAccessKeyId.NotFound", "Specified access key is not found.")
			return
		case tsErr != nil || time.Since(ts).Abs() > 15*time.Minute:
			aliyunJSON(w, 400, "InvalidTimeStamp.Expired", "Specified time stamp or date value is expired.")
			return
		case q.Get("SignatureNonce") == "" || s.nonceUsed(q.Get("SignatureNonce")):
			aliyunJSON(w, 400, "SignatureNonceUsed", "Specified signature nonce was used already.")
			return
		case q.Get("Signature") != aliyunDocSignature(q, aliyunSecret):
			aliyunJSON(w, 400, "SignatureDoesNotMatch", "Specified signature is not matched with our calculation. server string to sign is:"+aliyunDocStringToSign(q))
			return
		case q.Get("PhoneNumbers") == "" || q.Get("SignName") == "" || q.Get("TemplateCode") == "":
			aliyunJSON(w, 400, "MissingParameter", "A required parameter is missing.")
			return
		}
		s.mu.Lock()
		s.last = q
		s.mu.Unlock()
		reply(w)
	}
}

func (s *aliyunServer) nonceUsed(n string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	used := s.nonces[n]
	s.nonces[n] = true
	return used
}

func setupAliyun(t *testing.T, secret string, reply func(w http.ResponseWriter)) (provider.SMSSender, *aliyunServer) {
	t.Helper()
	fs := &aliyunServer{nonces: map[string]bool{}}
	srv := httptest.NewServer(fs.handler(reply))
	t.Cleanup(srv.Close)
	s, err := New(NameAliyun, Config{Aliyun: AliyunConfig{
		AccessKeyID: aliyunKeyID, AccessKeySecret: secret, SignName: "消息脉搏",
		Templates: map[string]string{"verify_code": "SMS_123456", "notice": "SMS_654321"},
		Endpoint:  srv.URL + "/",
	}}, zap.NewNop(), nil)
	require.NoError(t, err)
	return s, fs
}

func aliyunReply(status int, code, msg string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) { aliyunJSON(w, status, code, msg) }
}

func TestAliyunSend(t *testing.T) {
	t.Parallel()
	ok := func(w http.ResponseWriter) {
		_, _ = fmt.Fprint(w, `{"Message":"OK","RequestId":"F655A8D5-B967-440B-8683-DAD6FF8DE990","Code":"OK","BizId":"900619746936498440^0"}`)
	}
	for _, tc := range []struct {
		name      string
		secret    string
		msg       func(provider.SMS) provider.SMS
		reply     func(http.ResponseWriter)
		wantPhone string
		wantErr   *wantErr
		wantCalls int
	}{
		{name: "OK", reply: ok, wantPhone: "13900001234"},
		{name: "OK international", msg: func(m provider.SMS) provider.SMS { m.To = "+447700900123"; return m }, reply: ok, wantPhone: "447700900123"},
		{name: "business limit", reply: aliyunReply(200, "isv.BUSINESS_LIMIT_CONTROL", "触发分钟级流控Permits:1"), wantErr: &wantErr{class: provider.Throttled, code: "isv.BUSINESS_LIMIT_CONTROL"}},
		{name: "day limit", reply: aliyunReply(200, "isv.DAY_LIMIT_CONTROL", "触发日发送限额"), wantErr: &wantErr{class: provider.Throttled, code: "isv.DAY_LIMIT_CONTROL"}},
		{name: "api throttling", reply: aliyunReply(400, "Throttling.User", "Request was denied due to user flow control."), wantErr: &wantErr{class: provider.Throttled, code: "Throttling.User"}},
		{name: "unknown limit code", reply: aliyunReply(200, "isv.NEW_LIMIT_CONTROL", "x"), wantErr: &wantErr{class: provider.Throttled, code: "isv.NEW_LIMIT_CONTROL"}},
		{name: "system error", reply: aliyunReply(200, "isp.SYSTEM_ERROR", "isp.SYSTEM_ERROR"), wantErr: &wantErr{class: provider.Transient, code: "isp.SYSTEM_ERROR"}},
		{name: "service unavailable", reply: aliyunReply(503, "ServiceUnavailable", "The request has failed due to a temporary failure of the server."), wantErr: &wantErr{class: provider.Transient, code: "ServiceUnavailable"}},
		{name: "bad gateway html", reply: respond(502, "<html>502 Bad Gateway</html>"), wantErr: &wantErr{class: provider.Transient, code: "502"}},
		{name: "illegal number", reply: aliyunReply(200, "isv.MOBILE_NUMBER_ILLEGAL", "非法手机号"), wantErr: &wantErr{class: provider.Permanent, code: "isv.MOBILE_NUMBER_ILLEGAL"}},
		{name: "invalid parameters", reply: aliyunReply(200, "isv.INVALID_PARAMETERS", "参数异常"), wantErr: &wantErr{class: provider.Permanent, code: "isv.INVALID_PARAMETERS"}},
		{name: "template illegal", reply: aliyunReply(200, "isv.SMS_TEMPLATE_ILLEGAL", "该账号下找不到对应模板"), wantErr: &wantErr{class: provider.Permanent, code: "isv.SMS_TEMPLATE_ILLEGAL"}},
		{name: "signature illegal", reply: aliyunReply(200, "isv.SMS_SIGNATURE_ILLEGAL", "该账号下找不到对应签名"), wantErr: &wantErr{class: provider.Permanent, code: "isv.SMS_SIGNATURE_ILLEGAL"}},
		{name: "template missing parameters", reply: aliyunReply(200, "isv.TEMPLATE_MISSING_PARAMETERS", "模板变量缺少对应参数值"), wantErr: &wantErr{class: provider.Permanent, code: "isv.TEMPLATE_MISSING_PARAMETERS"}},
		{name: "amount not enough", reply: aliyunReply(200, "isv.AMOUNT_NOT_ENOUGH", "账户余额不足"), wantErr: &wantErr{class: provider.Permanent, code: "isv.AMOUNT_NOT_ENOUGH"}},
		{name: "blacklisted keyword is not throttling", reply: aliyunReply(200, "isv.BLACK_KEY_CONTROL_LIMIT", "模板变量中存在黑名单关键字"), wantErr: &wantErr{class: provider.Permanent, code: "isv.BLACK_KEY_CONTROL_LIMIT"}},
		{name: "unknown isv code", reply: aliyunReply(200, "isv.SOMETHING_NEW", "x"), wantErr: &wantErr{class: provider.Permanent, code: "isv.SOMETHING_NEW"}},
		{name: "unknown isp code", reply: aliyunReply(200, "isp.SOMETHING_NEW", "x"), wantErr: &wantErr{class: provider.Transient, code: "isp.SOMETHING_NEW"}},
		{name: "unknown code on 200", reply: aliyunReply(200, "Mystery", "x"), wantErr: &wantErr{class: provider.Transient, code: "Mystery"}},
		{name: "access key not found", reply: aliyunReply(404, "InvalidAccessKeyId.NotFound", "Specified access key is not found."), wantErr: &wantErr{class: provider.Permanent, code: "InvalidAccessKeyId.NotFound"}},
		// Proves the fake checks signatures. Aliyun's reply echoes the
		// string to sign (number and code included): it must be scrubbed.
		{name: "wrong secret", secret: "wrong", reply: ok, wantErr: &wantErr{class: provider.Permanent, code: "SignatureDoesNotMatch"}},
		{name: "unmapped template", msg: func(m provider.SMS) provider.SMS { m.Template = "welcome"; return m }, reply: ok,
			wantErr: &wantErr{class: provider.Permanent, code: "template_not_mapped"}, wantCalls: -1},
		{name: "no template", msg: func(m provider.SMS) provider.SMS { m.Template = ""; return m }, reply: ok,
			wantErr: &wantErr{class: provider.Permanent, code: "template_required"}, wantCalls: -1},
		{name: "not E.164", msg: func(m provider.SMS) provider.SMS { m.To = "13900001234"; return m }, reply: ok,
			wantErr: &wantErr{class: provider.Permanent, code: "invalid_recipient"}, wantCalls: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			secret := aliyunSecret
			if tc.secret != "" {
				secret = tc.secret
			}
			s, fs := setupAliyun(t, secret, tc.reply)
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
				pe := requireProviderError(t, err, NameAliyun, *tc.wantErr)
				if tc.wantErr.code == "template_not_mapped" {
					require.Contains(t, pe.Message, `"welcome"`)
					require.Contains(t, pe.Message, "ALIYUN_SMS_TEMPLATES")
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, provider.Receipt{Provider: NameAliyun, MessageID: "900619746936498440^0"}, rc)
			q := fs.last
			require.Equal(t, tc.wantPhone, q.Get("PhoneNumbers"))
			require.Equal(t, "消息脉搏", q.Get("SignName"))
			require.Equal(t, "SMS_123456", q.Get("TemplateCode"))
			require.Equal(t, m.TaskID, q.Get("OutId"))
			var params map[string]string
			require.NoError(t, json.Unmarshal([]byte(q.Get("TemplateParam")), &params))
			require.Equal(t, m.Params, params)
		})
	}
}

func TestAliyunNoncesDiffer(t *testing.T) {
	t.Parallel()
	s, fs := setupAliyun(t, aliyunSecret, func(w http.ResponseWriter) {
		_, _ = fmt.Fprint(w, `{"Message":"OK","RequestId":"r","Code":"OK","BizId":"b"}`)
	})
	// The fake refuses a reused nonce, as Aliyun does.
	for range 3 {
		_, err := s.SendSMS(context.Background(), verifySMS())
		require.NoError(t, err)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	require.Len(t, fs.nonces, 3)
}
