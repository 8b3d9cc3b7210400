package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/receipt"
	"github.com/msgpulse/msgpulse/internal/receipt/smshook"
	"github.com/msgpulse/msgpulse/internal/receipt/smslookup"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

// recordingApplier records the receipts the SMS hooks apply (the real
// Applier is internal/receipt/applier's, wired in run.go).
type recordingApplier struct {
	mu  sync.Mutex
	got []receipt.Receipt
}

func (r *recordingApplier) Apply(_ context.Context, rc receipt.Receipt) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, rc)
	return nil
}

func (r *recordingApplier) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// The vendors' hooks are served without X-API-Key, and neither a hook's
// path token nor a Twilio signature reaches a log line.
func TestSMSHooksNeedNoAPIKeyAndLogNoSecret(t *testing.T) {
	const (
		base        = "https://msg.example.com"
		twilioToken = "twilio-auth-token-for-the-api-test"
		aliyunToken = "aliyun-token-for-the-api-test-0001"
	)
	h := setup(t, options{smsHooks: &smshook.Config{PublicBaseURL: base, TwilioAuthToken: twilioToken, AliyunToken: aliyunToken}})
	ctx := testenv.Context(t, 10*time.Second)
	lookup := smslookup.New(h.redis.Client, h.redis.Prefix)
	require.NoError(t, lookup.Put(ctx, "twilio", "SMabc", smslookup.Entry{TaskID: "t-tw", Recipient: "+14155550100"}))
	require.NoError(t, lookup.Put(ctx, "aliyun", "900^1", smslookup.Entry{TaskID: "t-ali", Recipient: "+8613900001234"}))

	form := url.Values{"MessageSid": {"SMabc"}, "MessageStatus": {"delivered"}, "To": {"+14155550100"}}
	sig := smshook.TwilioSignature(twilioToken, base+smshook.TwilioPath, form)
	send := func(path, contentType, body string, hdr http.Header) int {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.http.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header = hdr
		req.Header.Set("Content-Type", contentType)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusNoContent, send(smshook.TwilioPath, "application/x-www-form-urlencoded", form.Encode(), http.Header{"X-Twilio-Signature": {sig}}))
	require.Equal(t, http.StatusForbidden, send(smshook.TwilioPath, "application/x-www-form-urlencoded", form.Encode(), http.Header{"X-Twilio-Signature": {sig[:len(sig)-2] + "AA"}}))
	push := `[{"phone_number":"13900001234","report_time":"2026-11-29 19:58:03","success":true,"err_code":"DELIVERED","biz_id":"900^1"}]`
	require.Equal(t, http.StatusOK, send("/hooks/sms/aliyun/"+aliyunToken, "application/json", push, http.Header{}))
	require.Equal(t, http.StatusForbidden, send("/hooks/sms/aliyun/"+aliyunToken+"-wrong", "application/json", push, http.Header{}))
	require.Equal(t, http.StatusNotFound, send("/hooks/sms/tencent/"+aliyunToken, "application/json", push, http.Header{}))
	require.Equal(t, 2, h.applied.count())

	testenv.WaitFor(t, 5*time.Second, "the hooks' request lines", func() bool { return h.logs.FilterMessage("request").Len() >= 5 })
	for _, e := range h.logs.All() {
		line := e.Message
		for k, v := range e.ContextMap() {
			line += " " + k + "=" + anyString(v)
		}
		require.NotContains(t, line, aliyunToken, "a hook's token in a log line")
		require.NotContains(t, line, sig[:20], "a signature in a log line")
		require.NotContains(t, line, twilioToken)
	}
}

func anyString(v any) string { return fmt.Sprint(v) }
