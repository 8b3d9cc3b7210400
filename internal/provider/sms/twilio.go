package sms

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/receipt"
)

// Twilio Programmable Messaging: create a Message.
// https://www.twilio.com/docs/messaging/api/message-resource
type twilio struct {
	httpSender
	cfg      TwilioConfig
	endpoint string
}

func newTwilio(c TwilioConfig, timeout time.Duration) *twilio {
	endpoint := strings.TrimRight(c.BaseURL, "/") + "/2010-04-01/Accounts/" + url.PathEscape(c.AccountSID) + "/Messages.json"
	return &twilio{httpSender: newHTTPSender(NameTwilio, timeout), cfg: c, endpoint: endpoint}
}

// Twilio error codes whose class the HTTP status alone would get wrong or
// leave vague. https://www.twilio.com/docs/api/errors
var twilioCodes = map[int]provider.Class{
	20429: provider.Throttled, // Too Many Requests
	14107: provider.Throttled, // outbound SMS rate limit for the account
	20003: provider.Permanent, // authentication failed
	20404: provider.Permanent, // resource not found: wrong Account SID
	21211: provider.Permanent, // invalid 'To' number
	21212: provider.Permanent, // invalid 'From' number
	21408: provider.Permanent, // region not enabled in geo permissions
	21606: provider.Permanent, // 'From' cannot send SMS
	21608: provider.Permanent, // trial account: 'To' not verified
	21610: provider.Permanent, // recipient replied STOP
	21612: provider.Permanent, // 'To' not reachable from this 'From'
	21614: provider.Permanent, // 'To' is not a mobile number
	21617: provider.Permanent, // body too long
	20500: provider.Transient, // Twilio internal error
	20503: provider.Transient, // service unavailable
}

func (t *twilio) SendSMS(ctx context.Context, m provider.SMS) (provider.Receipt, error) {
	if !e164(m.To) {
		return provider.Receipt{}, badRecipient(t.name, m.To)
	}
	if strings.TrimSpace(m.Text) == "" {
		return provider.Receipt{}, &provider.Error{Provider: t.name, Class: provider.Permanent, Code: "empty_text", Message: "twilio sends free text, and the message has none"}
	}
	form := url.Values{"To": {m.To}, "Body": {m.Text}}
	if t.cfg.StatusCallback != "" {
		form.Set("StatusCallback", t.cfg.StatusCallback)
	}
	if t.cfg.MessagingServiceSID != "" {
		form.Set("MessagingServiceSid", t.cfg.MessagingServiceSID)
	} else {
		form.Set("From", t.cfg.From)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return provider.Receipt{}, &provider.Error{Provider: t.name, Class: provider.Permanent, Code: "request", Err: err}
	}
	req.SetBasicAuth(t.cfg.AccountSID, t.cfg.AuthToken)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	rep, err := t.do(req)
	if err != nil {
		return provider.Receipt{}, err
	}
	if rep.status/100 == 2 {
		var ok struct {
			SID    string `json:"sid"`
			Status string `json:"status"`
		}
		if json.Unmarshal(rep.body, &ok) != nil || ok.SID == "" {
			// Twilio took the message (2xx) but we cannot read its id:
			// retrying would send it twice, so report success.
			return provider.Receipt{Provider: t.name}, nil //nolint:nilerr // see above: a retry would send a duplicate
		}
		return provider.Receipt{Provider: t.name, MessageID: ok.SID}, nil
	}
	var e struct {
		Code     int    `json:"code"`
		Message  string `json:"message"`
		MoreInfo string `json:"more_info"`
	}
	_ = json.Unmarshal(rep.body, &e) // a proxy's HTML error page still has a status
	class, ok := twilioCodes[e.Code]
	if !ok {
		class = classifyStatus(rep.status)
	}
	code := strconv.Itoa(rep.status)
	if e.Code != 0 {
		code = strconv.Itoa(e.Code)
	}
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(rep.status)
	}
	pe := t.newErr(class, code, msg, m)
	if class == provider.Throttled {
		pe.RetryAfter = retryAfter(rep.header, t.now())
	}
	if e.Code == twilioOptedOut {
		// The number replied STOP: a receipt in itself. The pipeline
		// acks the message and suppresses the number (its Unwrap is pe,
		// so anything that only classifies sees a permanent failure).
		return provider.Receipt{}, &receipt.RefusedError{Err: pe, Receipt: receipt.Receipt{
			Channel: "sms", Kind: receipt.Undelivered, Code: code, Detail: pe.Message,
			Source: NameTwilio, Recipient: m.To, Suppress: receipt.SuppressOptOut,
		}}
	}
	return provider.Receipt{}, pe
}

// twilioOptedOut is Twilio's "Attempt to send to unsubscribed recipient":
// the number replied STOP (or another opt-out keyword) to this sender.
const twilioOptedOut = 21610
