package config

import (
	"net"
	"net/url"
	"strings"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/receipt/smshook"
)

// Receipts are the settings of what comes back after a message was sent
// (issue 45): the public URL vendors and readers reach msgpulse at, the
// key that signs what msgpulse hands out (VERP return paths, unsubscribe
// links), the bounce domain and receiver, the SMS vendors' hook tokens and
// DKIM. The API and the consumer load the same ones: the consumer signs
// what the API later checks.
type Receipts struct {
	// PublicBaseURL is msgpulse's API as the world reaches it, without a
	// trailing slash: Twilio's StatusCallback and the List-Unsubscribe
	// link are made from it, and X-Twilio-Signature is checked over it,
	// never over the Host header. https, or http on a loopback address.
	PublicBaseURL string
	// Secret is RECEIPT_SECRET: it signs VERP tokens and unsubscribe
	// tokens. Required (≥32 bytes) when a feature that signs is on.
	Secret string
	// BounceDomain is MAIL_BOUNCE_DOMAIN: every mail's envelope sender is
	// a signed address at it ("" = today's envelope sender).
	BounceDomain string
	// BounceSMTPAddr is BOUNCE_SMTP_ADDR: the API runs the bounce
	// receiver's SMTP server there ("" = off).
	BounceSMTPAddr string
	// AliyunToken and TencentToken are the secret path segments of the
	// vendors' unsigned report hooks ("" = that hook is off).
	AliyunToken  string
	TencentToken string
	// TwilioAuthToken is TWILIO_AUTH_TOKEN as the API reads it: the key
	// of X-Twilio-Signature on /hooks/sms/twilio ("" = that hook is off).
	TwilioAuthToken string
	// DKIM signs outgoing mail when all three are set.
	DKIMDomain, DKIMSelector, DKIMKeyFile string
}

// TwilioHookPath is where Twilio posts status callbacks, under
// PublicBaseURL: the consumer sends it as StatusCallback, the API serves
// it, and the signature is computed over PublicBaseURL + TwilioHookPath.
const TwilioHookPath = smshook.TwilioPath

// TwilioStatusCallback is the StatusCallback a Twilio send carries: ""
// without PUBLIC_BASE_URL (no receipts from Twilio).
func (r Receipts) TwilioStatusCallback() string {
	if r.PublicBaseURL == "" {
		return ""
	}
	return r.PublicBaseURL + TwilioHookPath
}

// minReceiptSecret is RECEIPT_SECRET's shortest length in bytes.
const minReceiptSecret = 32

// Signs reports whether a feature that hands out signed tokens is on.
func (r Receipts) Signs() bool { return r.BounceDomain != "" || r.PublicBaseURL != "" }

// loadReceipts reads the settings; api says which program: the API runs
// the receivers (bounce server, SMS hooks), the consumer signs mail (DKIM).
func loadReceipts(l *envconf.Loader, api bool) Receipts {
	var r Receipts
	r.PublicBaseURL = strings.TrimRight(l.String("PUBLIC_BASE_URL", "",
		"msgpulse's API as vendors and readers reach it (https://msg.example.com): Twilio's StatusCallback and the List-Unsubscribe link are made from it; http only on a loopback address; empty = no SMS receipts from Twilio, no unsubscribe headers"), "/")
	if r.PublicBaseURL != "" {
		if err := checkPublicBaseURL(r.PublicBaseURL); err != "" {
			l.Fail("PUBLIC_BASE_URL", r.PublicBaseURL, "%s", err)
		}
	}
	r.Secret = l.Secret("RECEIPT_SECRET", "", "key (≥32 bytes, its own: not CODE_SECRET nor a callback secret) that signs VERP return paths and unsubscribe links; required with MAIL_BOUNCE_DOMAIN or PUBLIC_BASE_URL")
	r.BounceDomain = strings.ToLower(l.String("MAIL_BOUNCE_DOMAIN", "", "domain of every mail's envelope sender (Return-Path), a signed address per message, whose MX points at BOUNCE_SMTP_ADDR; empty = SMTP_FROM is the envelope sender and bounces are not read"))
	if r.Signs() && len(r.Secret) < minReceiptSecret {
		l.Fail("RECEIPT_SECRET", "", "must be at least %d bytes when MAIL_BOUNCE_DOMAIN or PUBLIC_BASE_URL is set (openssl rand -hex 32)", minReceiptSecret)
	}
	if api {
		loadReceivers(l, &r)
	} else {
		loadDKIM(l, &r)
	}
	return r
}

// loadReceivers reads the API's receivers: the bounce SMTP server and the
// SMS vendors' hook tokens.
func loadReceivers(l *envconf.Loader, r *Receipts) {
	r.BounceSMTPAddr = l.String("BOUNCE_SMTP_ADDR", "", "address of the API's bounce receiver, an SMTP server for MAIL_BOUNCE_DOMAIN (:25 behind its MX); empty = off")
	if r.BounceSMTPAddr != "" && r.BounceDomain == "" {
		l.Fail("BOUNCE_SMTP_ADDR", r.BounceSMTPAddr, "needs MAIL_BOUNCE_DOMAIN: the receiver takes mail for that domain only")
	}
	r.AliyunToken = l.Secret("SMS_ALIYUN_RECEIPT_TOKEN", "", "secret path segment of Aliyun's SmsReport push, PUBLIC_BASE_URL/hooks/sms/aliyun/TOKEN (≥16 bytes; empty = hook off)")
	r.TencentToken = l.Secret("SMS_TENCENT_RECEIPT_TOKEN", "", "secret path segment of Tencent's status callback, PUBLIC_BASE_URL/hooks/sms/tencent/TOKEN (≥16 bytes; empty = hook off)")
	r.TwilioAuthToken = l.Secret("TWILIO_AUTH_TOKEN", "", "twilio: Auth Token, the key of X-Twilio-Signature on PUBLIC_BASE_URL/hooks/sms/twilio (the consumer's TWILIO_AUTH_TOKEN; empty or no PUBLIC_BASE_URL = hook off)")
	for _, t := range []struct{ name, v string }{{"SMS_ALIYUN_RECEIPT_TOKEN", r.AliyunToken}, {"SMS_TENCENT_RECEIPT_TOKEN", r.TencentToken}} {
		if t.v != "" && len(t.v) < 16 {
			l.Fail(t.name, "", "must be at least 16 bytes")
		}
	}
}

// loadDKIM reads the consumer's DKIM signing settings.
func loadDKIM(l *envconf.Loader, r *Receipts) {
	r.DKIMDomain = l.String("DKIM_DOMAIN", "", "d= of the DKIM signature on every mail (with DKIM_SELECTOR and DKIM_PRIVATE_KEY_FILE; empty = no DKIM)")
	r.DKIMSelector = l.String("DKIM_SELECTOR", "", "s= of the DKIM signature")
	r.DKIMKeyFile = l.String("DKIM_PRIVATE_KEY_FILE", "", "PEM file of the DKIM private key (RSA or Ed25519)")
	if set := countSet(r.DKIMDomain, r.DKIMSelector, r.DKIMKeyFile); set != 0 && set != 3 {
		l.Fail("DKIM_DOMAIN", r.DKIMDomain, "DKIM_DOMAIN, DKIM_SELECTOR and DKIM_PRIVATE_KEY_FILE go together")
	}
}

func countSet(vs ...string) int {
	n := 0
	for _, v := range vs {
		if v != "" {
			n++
		}
	}
	return n
}

// checkPublicBaseURL says what is wrong with u, or "". RFC 8058 asks for
// https; http is let through on a loopback host only, so that the flow can
// be tried with make run and in tests.
func checkPublicBaseURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" || p.RawQuery != "" || p.Fragment != "" || p.User != nil {
		return "must be an absolute URL without credentials, query or fragment"
	}
	switch p.Scheme {
	case "https":
		return ""
	case "http":
		host := p.Hostname()
		if host == "localhost" {
			return ""
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
			return ""
		}
		return "must be https (http only on a loopback address)"
	}
	return "must be an https URL"
}
