package client_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/callbackkey"
	"github.com/msgpulse/msgpulse/pkg/client"
)

// VerifyCallback accepts what the consumer signs (callbackkey.Sign) with
// the tenant's key, and refuses another tenant's key, another URL, a
// changed body and a replay older than five minutes.
func TestVerifyCallbackAgreesWithTheSigner(t *testing.T) {
	t.Parallel()
	const url, keyA, keyB = "https://hooks.shop.example/status?x=1", "shopA-callback-secret-01", "shopB-callback-secret-02"
	body := []byte(`{"event":"message.status","taskId":"t1"}`)
	req := func(ts time.Time, tenant, signKey string, b []byte) *http.Request {
		r := httptest.NewRequest("POST", url, bytes.NewReader(b))
		r.Header.Set(callbackkey.TimestampHeader, strconv.FormatInt(ts.Unix(), 10))
		r.Header.Set(callbackkey.TenantHeader, tenant)
		r.Header.Set(callbackkey.SignatureHeader, callbackkey.Sign(signKey, ts.Unix(), tenant, url, body))
		return r
	}
	now := time.Now()
	got, err := client.VerifyCallback(req(now, "shopA", keyA, body), keyA, "shopA", url)
	require.NoError(t, err)
	require.Equal(t, body, got)
	_, err = client.VerifyCallback(req(now, "shopA", keyA, body), keyB, "", url)
	require.ErrorIs(t, err, client.ErrCallbackSignature, "another tenant's key")
	_, err = client.VerifyCallback(req(now, "shopA", keyA, body), keyA, "shopA", url+"&y=2")
	require.ErrorIs(t, err, client.ErrCallbackSignature, "another URL")
	_, err = client.VerifyCallback(req(now, "shopA", keyA, []byte(`{"event":"message.status","taskId":"t2"}`)), keyA, "shopA", url)
	require.ErrorIs(t, err, client.ErrCallbackSignature, "a changed body")
	_, err = client.VerifyCallback(req(now, "shopB", keyA, body), keyA, "shopA", url)
	require.ErrorIs(t, err, client.ErrCallbackTenant)
	_, err = client.VerifyCallback(req(now.Add(-6*time.Minute), "shopA", keyA, body), keyA, "shopA", url)
	require.ErrorIs(t, err, client.ErrCallbackStale, "a replay")
}
