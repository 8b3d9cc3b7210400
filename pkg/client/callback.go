package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// CallbackMaxAge is how old (or how far ahead of this clock) a callback's
// X-Msgpulse-Timestamp may be: an older one is refused as a replay.
const CallbackMaxAge = 5 * time.Minute

// Callback verification errors.
var (
	ErrCallbackSignature = errors.New("msgpulse callback: signature does not match")
	ErrCallbackStale     = errors.New("msgpulse callback: timestamp older than 5 minutes or in the future (a replay?)")
	ErrCallbackTenant    = errors.New("msgpulse callback: for another tenant")
)

// VerifyCallback checks a status callback msgpulse POSTed to callbackURL
// (exactly as the message gave it) and returns its body. key is the
// tenant's callback key (the operator prints it with `api callback-key
// -tenant NAME`), tenant the tenant it must be for ("" skips that check).
// The signature, X-Msgpulse-Signature: v1=HEX, is the HMAC-SHA256 under
// key of
//
//	"v1\n" + X-Msgpulse-Timestamp + "\n" + X-Msgpulse-Tenant + "\n" + callbackURL + "\n" + body
//
// and a timestamp more than CallbackMaxAge from now is refused. It reads at
// most 1 MiB of body.
func VerifyCallback(r *http.Request, key, tenant, callbackURL string) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("msgpulse callback: reading the body: %w", err)
	}
	ts, gotTenant := r.Header.Get("X-Msgpulse-Timestamp"), r.Header.Get("X-Msgpulse-Tenant")
	if tenant != "" && gotTenant != tenant {
		return nil, ErrCallbackTenant
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return nil, ErrCallbackStale
	}
	if d := time.Since(time.Unix(sec, 0)); d > CallbackMaxAge || d < -CallbackMaxAge {
		return nil, ErrCallbackStale
	}
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte("v1\n" + ts + "\n" + gotTenant + "\n" + callbackURL + "\n"))
	m.Write(body)
	want := "v1=" + hex.EncodeToString(m.Sum(nil))
	if !hmac.Equal([]byte(r.Header.Get("X-Msgpulse-Signature")), []byte(want)) {
		return nil, ErrCallbackSignature
	}
	return body, nil
}
