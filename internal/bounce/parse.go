package bounce

import (
	"bufio"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	netmail "net/mail"
	"net/textproto"
	"regexp"
	"strings"
	"time"
)

// The report types a Report can be (RFC 6522's report-type parameter).
const (
	TypeDSN = "delivery-status" // RFC 3464
	TypeARF = "feedback-report" // RFC 5965
)

// Report is what a bounce or a complaint says, as read from the mail.
type Report struct {
	// Type is TypeDSN or TypeARF.
	Type string
	// Recipients are a DSN's per-recipient blocks.
	Recipients []RecipientStatus
	// Feedback is an ARF report's; nil for a DSN.
	Feedback *Feedback
	// Arrival is the DSN's Arrival-Date (zero when absent).
	Arrival time.Time
}

// RecipientStatus is one per-recipient block of a DSN (RFC 3464 §2.3).
type RecipientStatus struct {
	Recipient  string // Final-Recipient (or Original-Recipient), a bare lower-case mailbox; "" when unreadable
	Action     string // failed, delayed, delivered, relayed, expanded (lower-case)
	Status     string // "5.1.1"
	Diagnostic string // Diagnostic-Code without its type ("smtp; "), one line
	At         time.Time
}

// Feedback is an ARF report's (RFC 5965 §3.1, 3.2).
type Feedback struct {
	Type string // Feedback-Type, lower-case: abuse, fraud, not-spam, ...
	// OriginalMailFrom is the report's Original-Mail-From: the complained
	// message's envelope sender, our VERP address, when the reporter kept it.
	OriginalMailFrom string
	// ReturnPath is the Return-Path of the original headers the report
	// carries (message/rfc822 or text/rfc822-headers).
	ReturnPath string
	// Recipient is Original-Rcpt-To, or the original headers' To, as a
	// bare lower-case mailbox; "" when the reporter redacted it.
	Recipient string
	At        time.Time
}

// ErrNotReport: the mail is not a multipart/report of a type read here (a
// vacation reply, a hand-written "please stop", a bounce in prose).
var ErrNotReport = errors.New("bounce: not a delivery-status or feedback report")

// maxDepth bounds how deep nested multiparts are walked.
const maxDepth = 4

// Parse reads a DSN or an ARF report. It returns ErrNotReport for other
// mail and an error for a report it cannot read.
func Parse(r io.Reader) (*Report, error) {
	msg, err := netmail.ReadMessage(r)
	if err != nil {
		return nil, fmt.Errorf("bounce: read message: %w", err)
	}
	rep := &Report{}
	if err := walk(rep, textproto.MIMEHeader(msg.Header), msg.Body, 0); err != nil {
		return nil, err
	}
	switch rep.Type {
	case TypeDSN:
		if len(rep.Recipients) == 0 {
			return nil, errors.New("bounce: delivery-status report without a recipient block")
		}
	case TypeARF:
		if rep.Feedback == nil {
			return nil, errors.New("bounce: feedback report without its message/feedback-report part")
		}
	default:
		return nil, ErrNotReport
	}
	return rep, nil
}

// walk reads one MIME entity with header h and (still encoded) body.
func walk(rep *Report, h textproto.MIMEHeader, body io.Reader, depth int) error {
	if depth > maxDepth {
		return nil
	}
	ct := h.Get("Content-Type")
	if ct == "" {
		ct = "text/plain"
	}
	mt, params, perr := mime.ParseMediaType(ct)
	if perr != nil {
		mt = "" // an unreadable part of a report is skipped, not fatal
	}
	switch {
	case strings.HasPrefix(mt, "multipart/"):
		if mt == "multipart/report" && rep.Type == "" {
			switch rt := strings.ToLower(params["report-type"]); rt {
			case TypeDSN, TypeARF:
				rep.Type = rt
			}
		}
		if params["boundary"] == "" {
			return nil
		}
		mr := multipart.NewReader(body, params["boundary"])
		for {
			p, err := mr.NextRawPart()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				if rep.Type != "" {
					return nil // a truncated tail (size-limited returned content) after what matters
				}
				return fmt.Errorf("bounce: multipart: %w", err)
			}
			if err := walk(rep, p.Header, p, depth+1); err != nil {
				return err
			}
		}
	case mt == "message/delivery-status" || mt == "message/global-delivery-status":
		if rep.Type != TypeDSN {
			return nil
		}
		return readDSN(rep, decode(h, body))
	case mt == "message/feedback-report":
		if rep.Type != TypeARF {
			return nil
		}
		return readFeedback(rep, decode(h, body))
	case mt == "message/rfc822" || mt == "text/rfc822-headers" || mt == "message/global" || mt == "message/global-headers":
		if rep.Type == TypeARF {
			readOriginal(rep, decode(h, body))
		}
	}
	return nil
}

// decode undoes a part's Content-Transfer-Encoding (report parts are
// 7bit nearly always; some reporters base64 them).
func decode(h textproto.MIMEHeader, body io.Reader) io.Reader {
	switch strings.ToLower(strings.TrimSpace(h.Get("Content-Transfer-Encoding"))) {
	case "base64":
		return base64.NewDecoder(base64.StdEncoding, &stripSpace{r: body})
	case "quoted-printable":
		return quotedprintable.NewReader(body)
	}
	return body
}

// stripSpace drops the line breaks base64.NewDecoder does not take.
type stripSpace struct{ r io.Reader }

func (s *stripSpace) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	j := 0
	for _, c := range p[:n] {
		if c != '\r' && c != '\n' && c != ' ' && c != '\t' {
			p[j] = c
			j++
		}
	}
	return j, err
}

// maxRecipientBlocks bounds what one DSN can make the receiver apply.
const maxRecipientBlocks = 50

// readDSN reads the per-message block and then the per-recipient blocks
// (RFC 3464 §2.2, 2.3): header blocks separated by blank lines.
func readDSN(rep *Report, r io.Reader) error {
	tp := textproto.NewReader(bufio.NewReader(r))
	first := true
	for len(rep.Recipients) < maxRecipientBlocks {
		h, err := tp.ReadMIMEHeader()
		if len(h) > 0 {
			if first {
				rep.Arrival = date(h.Get("Arrival-Date"))
			}
			if h.Get("Final-Recipient") != "" || h.Get("Original-Recipient") != "" || h.Get("Status") != "" {
				rep.Recipients = append(rep.Recipients, recipientStatus(h))
			}
			first = false
		}
		if err != nil {
			if errors.Is(err, io.EOF) || len(rep.Recipients) > 0 {
				return nil
			}
			return fmt.Errorf("bounce: delivery-status: %w", err)
		}
	}
	return nil
}

func recipientStatus(h textproto.MIMEHeader) RecipientStatus {
	rcpt := typedAddress(h.Get("Final-Recipient"))
	if rcpt == "" {
		rcpt = typedAddress(h.Get("Original-Recipient"))
	}
	return RecipientStatus{
		Recipient:  rcpt,
		Action:     strings.ToLower(strings.TrimSpace(h.Get("Action"))),
		Status:     statusCode(h.Get("Status")),
		Diagnostic: oneLine(typed(h.Get("Diagnostic-Code"))),
		At:         date(h.Get("Last-Attempt-Date")),
	}
}

func readFeedback(rep *Report, r io.Reader) error {
	h, err := textproto.NewReader(bufio.NewReader(r)).ReadMIMEHeader()
	if err != nil && !errors.Is(err, io.EOF) && len(h) == 0 {
		return fmt.Errorf("bounce: feedback-report: %w", err)
	}
	if rep.Feedback == nil {
		rep.Feedback = &Feedback{}
	}
	f := rep.Feedback
	f.Type = strings.ToLower(strings.TrimSpace(h.Get("Feedback-Type")))
	f.OriginalMailFrom = bareAddress(h.Get("Original-Mail-From"))
	if rcpt := bareAddress(h.Get("Original-Rcpt-To")); rcpt != "" {
		f.Recipient = rcpt
	}
	f.At = date(h.Get("Arrival-Date"))
	if f.At.IsZero() {
		f.At = date(h.Get("Received-Date"))
	}
	return nil
}

// readOriginal reads the header of the complained message.
func readOriginal(rep *Report, r io.Reader) {
	h, _ := textproto.NewReader(bufio.NewReader(io.LimitReader(r, 256<<10))).ReadMIMEHeader()
	if rep.Feedback == nil {
		rep.Feedback = &Feedback{}
	}
	if rp := bareAddress(h.Get("Return-Path")); rp != "" {
		rep.Feedback.ReturnPath = rp
	}
	if rep.Feedback.Recipient == "" {
		rep.Feedback.Recipient = bareAddress(h.Get("To"))
	}
}

var statusRE = regexp.MustCompile(`^([245])\.(\d{1,3})\.(\d{1,3})`)

// statusCode is a DSN Status field's code ("5.1.1 (bad mailbox)" →
// "5.1.1"), "" when it is not one.
func statusCode(s string) string {
	m := statusRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return ""
	}
	return m[1] + "." + m[2] + "." + m[3]
}

// typed drops an address or diagnostic type: "rfc822; bob@x" → "bob@x",
// "smtp; 550 ..." → "550 ...".
func typed(s string) string {
	if _, v, ok := strings.Cut(s, ";"); ok {
		return strings.TrimSpace(v)
	}
	return strings.TrimSpace(s)
}

func typedAddress(s string) string { return bareAddress(typed(s)) }

// bareAddress is the bare lower-case mailbox of an address field ("Bob
// <Bob@Example.com>", "<bob@example.com>"), or "" when there is none.
func bareAddress(s string) string {
	s = strings.TrimSpace(s)
	if s == "" || s == "<>" {
		return ""
	}
	if a, err := netmail.ParseAddress(s); err == nil {
		return strings.ToLower(a.Address)
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "<"), ">")
	if strings.Count(s, "@") != 1 || strings.ContainsAny(s, " \t<>,;\"") {
		return ""
	}
	return strings.ToLower(s)
}

// maxDetail bounds a diagnostic kept in a receipt (runes).
const maxDetail = 300

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > maxDetail {
		s = string(r[:maxDetail]) + "…"
	}
	return s
}

func date(s string) time.Time {
	if s = strings.TrimSpace(s); s == "" {
		return time.Time{}
	}
	t, err := netmail.ParseDate(s)
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}
