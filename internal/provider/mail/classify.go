package mail

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/textproto"
	"regexp"
	"strconv"
	"strings"

	gomail "github.com/wneessen/go-mail"
	gosmtp "github.com/wneessen/go-mail/smtp"

	"github.com/msgpulse/msgpulse/internal/logging"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/receipt"
)

// classify turns a send failure into a *provider.Error:
//
//	what failed                                          class      Code
//	4xx reply (421 450 451 452 454 ...)                  Transient  the reply code
//	4xx reply whose text speaks of rate/throttling/quota Throttled  the reply code
//	5xx reply (550 552 553 554 ...)                      Permanent  the reply code
//	AUTH refused (535 534 530 ... are 5xx replies)       Permanent  the reply code
//	server offers no STARTTLS (starttls) or no AUTH /
//	  no PLAIN, or PLAIN would go unencrypted            Permanent  ""
//	TLS certificate not trusted / wrong host / expired   Permanent  ""
//	TLS mode against a plain-text port (bad record)      Permanent  ""
//	other TLS handshake failures (reset, EOF, timeout)   Transient  ""
//	dial refused, DNS, reset, EOF, timeout               Transient  ""
//	context cancelled or past its deadline               Transient  ""
//	anything else                                        Transient  ""
//
// TLS: a certificate the system does not trust, or a TLS/plain-text
// mismatch, is a configuration problem that no retry within a message's
// lifetime fixes; failing permanently makes it visible at once (dead
// letters, alerts) instead of after every retry is spent. A handshake cut
// short by the network is just a network failure.
//
// Message is the server's reply text (or "" when there was no reply), with
// the recipient masked: servers often echo it, and errors end up in logs.
func classify(ctx context.Context, err error, rcpt string) *provider.Error {
	pe := &provider.Error{Provider: ProviderName, Class: provider.Transient, Err: err}
	var te *textproto.Error
	if errors.As(err, &te) {
		pe.Code = strconv.Itoa(te.Code)
		pe.Message = trimReply(te.Msg, rcpt)
		switch te.Code / 100 {
		case 5:
			pe.Class = provider.Permanent
		case 4:
			if throttleRE.MatchString(te.Msg) {
				pe.Class = provider.Throttled
			}
		}
		return pe
	}
	if ctx.Err() != nil {
		// The socket error an abort produces ("i/o timeout") says nothing;
		// the cause is the context.
		pe.Err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		return pe
	}
	if isConfigError(err) {
		pe.Class = provider.Permanent
	}
	return pe
}

// throttleRE recognises the texts providers use for rate limits in 4xx
// replies (e.g. SES "454 Throttling failure: Maximum sending rate
// exceeded", Gmail "421 4.7.28 ... rate limited", "452 Too many messages").
var throttleRE = regexp.MustCompile(`(?i)\b(throttl\w*|rate[ -]?limit\w*|sending rate|rate exceeded|too many (messages|mails|emails|connections|recipients|requests)|quota)\b`)

func isConfigError(err error) bool {
	var (
		certErr     *tls.CertificateVerificationError
		unknownCA   x509.UnknownAuthorityError
		hostErr     x509.HostnameError
		invalidCert x509.CertificateInvalidError
		recordErr   tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &certErr), errors.As(err, &unknownCA), errors.As(err, &hostErr),
		errors.As(err, &invalidCert), errors.As(err, &recordErr):
		return true
	case errors.Is(err, gomail.ErrPlainAuthNotSupported), errors.Is(err, gosmtp.ErrUnencrypted),
		errors.Is(err, gosmtp.ErrWrongHostname):
		return true
	}
	// go-mail reports these two with fmt.Errorf and no sentinel; the tests
	// pin the texts, so a go-mail upgrade that changes them fails loudly.
	s := err.Error()
	return strings.Contains(s, "does not support STARTTLS") || strings.Contains(s, "does not support SMTP AUTH")
}

// digitRunRE matches what could be a verification code (4 to 10 digits)
// or a phone number.
var digitRunRE = regexp.MustCompile(`[0-9]{4,}`)

// trimReply makes a server reply safe and short enough for a log line (and
// a status record, a callback, a DLQ listing). Servers echo the recipient,
// and content filters quote the subject or the text, which carry the code:
// the recipient is masked and every run of 4 or more digits hidden.
func trimReply(msg, rcpt string) string {
	msg = strings.Join(strings.Fields(msg), " ")
	if addr := rcptAddr(rcpt); addr != "" {
		msg = regexp.MustCompile(`(?i)`+regexp.QuoteMeta(addr)).ReplaceAllLiteralString(msg, logging.Mask(addr))
	}
	msg = digitRunRE.ReplaceAllLiteralString(msg, "****")
	if r := []rune(msg); len(r) > 300 {
		msg = string(r[:300]) + "…"
	}
	return msg
}

// enhancedRE reads the enhanced status code (RFC 3463) at the start of a
// reply's text: "5.1.1 <bob@example.com>: Recipient address rejected".
var enhancedRE = regexp.MustCompile(`^([245])\.(\d{1,3})\.(\d{1,3})\b`)

// noSuchRecipient are the 5.1.x codes that say the recipient's address is
// dead (RFC 3463): 5.1.1 no such mailbox, 5.1.2 no such domain, 5.1.3 the
// address cannot be an address, 5.1.6 the mailbox moved away, 5.1.10 the
// domain takes no mail (null MX, RFC 7505). The others of 5.1 name the
// sender's address (5.1.7, 5.1.8) or nothing in particular (5.1.0), so
// they must not put the recipient on the suppression list.
var noSuchRecipient = map[string]bool{"5.1.1": true, "5.1.2": true, "5.1.3": true, "5.1.6": true, "5.1.10": true}

// refused returns the *receipt.RefusedError of a server that refused the
// recipient at RCPT TO with one of noSuchRecipient's codes: a hard bounce
// during the send, which the pipeline acks and applies (the status becomes
// bounced, the address is suppressed). Every other failure is pe as it
// was. The refusal wraps pe, so errors.As still finds the permanent
// *provider.Error. A reply without an enhanced code ("550 no such user")
// stays a plain permanent failure: its reason is a guess.
func refused(failed, err error, rcpt string) error {
	var pe *provider.Error
	var se *stageError
	var te *textproto.Error
	if !errors.As(failed, &pe) || !errors.As(err, &se) || se.stage != stageRcpt || !errors.As(err, &te) || te.Code/100 != 5 {
		return failed
	}
	m := enhancedRE.FindStringSubmatch(te.Msg)
	if m == nil {
		return failed
	}
	code := m[1] + "." + m[2] + "." + m[3]
	if !noSuchRecipient[code] {
		return failed
	}
	return &receipt.RefusedError{Receipt: receipt.Receipt{
		Channel: "email", Kind: receipt.Bounced, Code: code, Detail: pe.Code + " " + pe.Message,
		Source: "smtp", Recipient: strings.ToLower(rcptAddr(rcpt)), Suppress: receipt.SuppressHardBounce,
	}, Err: pe}
}
