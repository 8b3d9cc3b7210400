package sms

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/msgpulse/msgpulse/internal/provider"
)

// Webhook headers and limits. The signature covers timestamp + "." + body
// so a captured request cannot be replayed later with a fresh timestamp.
const (
	WebhookTimestampHeader = "X-Msgpulse-Timestamp"
	WebhookSignatureHeader = "X-Msgpulse-Signature"
	WebhookMaxSkew         = 5 * time.Minute
)

// Errors VerifyWebhookSignature returns (wrapped), for errors.Is.
var (
	ErrWebhookSignature = errors.New("webhook signature mismatch")
	ErrWebhookTimestamp = errors.New("webhook timestamp invalid or outside the allowed skew")
)

// WebhookPayload is the JSON body the webhook sender posts.
type WebhookPayload struct {
	To        string            `json:"to"` // E.164
	Text      string            `json:"text"`
	TaskID    string            `json:"taskId"`
	Template  string            `json:"template,omitempty"`
	Params    map[string]string `json:"params,omitempty"`
	Timestamp int64             `json:"timestamp"` // unix seconds, same as the header
}

type webhook struct {
	httpSender
	url    string
	secret []byte
}

func newWebhook(c WebhookConfig, timeout time.Duration) *webhook {
	return &webhook{httpSender: newHTTPSender(NameWebhook, timeout), url: c.URL, secret: []byte(c.Secret)}
}

// signWebhook returns the X-Msgpulse-Signature value.
func signWebhook(secret []byte, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// VerifyWebhookSignature checks a request the webhook sender made: header is
// the X-Msgpulse-Signature value and timestamp the X-Msgpulse-Timestamp
// value, body the raw request body. It rejects timestamps more than
// WebhookMaxSkew away from now, and compares in constant time.
func VerifyWebhookSignature(secret string, timestamp string, body []byte, header string) error {
	return verifyWebhookAt(time.Now(), secret, timestamp, body, header)
}

func verifyWebhookAt(now time.Time, secret, timestamp string, body []byte, header string) error {
	ts, err := strconv.ParseInt(strings.TrimSpace(timestamp), 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %q is not unix seconds", ErrWebhookTimestamp, timestamp)
	}
	skew := now.Sub(time.Unix(ts, 0))
	if skew > WebhookMaxSkew || skew < -WebhookMaxSkew {
		return fmt.Errorf("%w: %s off", ErrWebhookTimestamp, skew.Round(time.Second))
	}
	hexSig, ok := strings.CutPrefix(strings.TrimSpace(header), "sha256=")
	if !ok {
		return fmt.Errorf("%w: header does not start with sha256=", ErrWebhookSignature)
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return fmt.Errorf("%w: not hex", ErrWebhookSignature)
	}
	want, _ := hex.DecodeString(strings.TrimPrefix(signWebhook([]byte(secret), timestamp, body), "sha256="))
	if !hmac.Equal(got, want) {
		return ErrWebhookSignature
	}
	return nil
}

func (w *webhook) SendSMS(ctx context.Context, m provider.SMS) (provider.Receipt, error) {
	if !e164(m.To) {
		return provider.Receipt{}, badRecipient(w.name, m.To)
	}
	now := w.now()
	ts := strconv.FormatInt(now.Unix(), 10)
	body, err := json.Marshal(WebhookPayload{To: m.To, Text: m.Text, TaskID: m.TaskID, Template: m.Template, Params: m.Params, Timestamp: now.Unix()})
	if err != nil {
		return provider.Receipt{}, &provider.Error{Provider: w.name, Class: provider.Permanent, Code: "encode", Err: err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return provider.Receipt{}, &provider.Error{Provider: w.name, Class: provider.Permanent, Code: "request", Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "msgpulse")
	req.Header.Set(WebhookTimestampHeader, ts)
	req.Header.Set(WebhookSignatureHeader, signWebhook(w.secret, ts, body))
	if m.TaskID != "" {
		// Lets the receiver drop a redelivery of a message it already took.
		req.Header.Set("Idempotency-Key", m.TaskID)
	}
	rep, err := w.do(req)
	if err != nil {
		return provider.Receipt{}, err
	}
	if rep.status >= 200 && rep.status < 300 {
		var ok struct {
			MessageID string `json:"messageId"`
		}
		_ = json.Unmarshal(rep.body, &ok) // the id is optional; any 2xx is acceptance
		return provider.Receipt{Provider: w.name, MessageID: ok.MessageID}, nil
	}
	e := w.newErr(classifyStatus(rep.status), strconv.Itoa(rep.status), http.StatusText(rep.status)+": "+string(rep.body), m)
	if e.Class == provider.Throttled {
		e.RetryAfter = retryAfter(rep.header, now)
	}
	return provider.Receipt{}, e
}
