package mailcatcher

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"maps"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"slices"
	"strings"
	"time"
)

// Message is one accepted message.
type Message struct {
	ID         int                 `json:"id"`   // 1, 2, ... in arrival order; never reused
	From       string              `json:"from"` // envelope sender (MAIL FROM)
	To         []string            `json:"to"`   // envelope recipients (RCPT TO)
	Subject    string              `json:"subject"`
	Text       string              `json:"text"` // first text/plain part, decoded, LF line ends
	HTML       string              `json:"html"` // first text/html part, decoded, LF line ends
	Headers    map[string][]string `json:"headers"`
	Raw        string              `json:"raw"` // as received, headers and body
	ReceivedAt time.Time           `json:"receivedAt"`
	// ParseError says why the message could not be fully parsed; the raw
	// message is kept either way, so a malformed message is still visible.
	ParseError string `json:"parseError,omitempty"`
}

// Header returns the first value of header name (any case), or "".
func (m Message) Header(name string) string {
	return mail.Header(m.Headers).Get(name)
}

func (m Message) clone() Message {
	m.To = slices.Clone(m.To)
	h := make(map[string][]string, len(m.Headers))
	for k, v := range m.Headers {
		h[k] = slices.Clone(v)
	}
	m.Headers = h
	return m
}

// maxDepth bounds MIME nesting: a hostile message cannot recurse forever.
const maxDepth = 8

func parseMessage(raw []byte) Message {
	m := Message{Raw: string(raw), Headers: map[string][]string{}}
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		m.ParseError = "headers: " + err.Error()
		return m
	}
	m.Headers = maps.Clone(map[string][]string(msg.Header))
	dec := new(mime.WordDecoder)
	m.Subject = msg.Header.Get("Subject")
	if s, err := dec.DecodeHeader(m.Subject); err == nil {
		m.Subject = s
	}
	if err := m.walk(msg.Header.Get("Content-Type"), msg.Header.Get("Content-Transfer-Encoding"), msg.Body, 0); err != nil {
		m.ParseError = err.Error()
	}
	return m
}

// walk fills Text and HTML from the first part of each type, in the order
// a mail client would find them.
func (m *Message) walk(contentType, encoding string, body io.Reader, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("MIME parts nested deeper than %d", maxDepth)
	}
	if contentType == "" {
		contentType = "text/plain; charset=us-ascii"
	}
	mediaType, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return fmt.Errorf("content type %q: %w", contentType, err)
	}
	if strings.HasPrefix(mediaType, "multipart/") {
		mr := multipart.NewReader(body, params["boundary"])
		for {
			p, err := mr.NextRawPart()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return fmt.Errorf("%s: %w", mediaType, err)
			}
			if err := m.walk(p.Header.Get("Content-Type"), p.Header.Get("Content-Transfer-Encoding"), p, depth+1); err != nil {
				return err
			}
		}
	}
	if mediaType != "text/plain" && mediaType != "text/html" {
		return nil // attachments and images are not shown
	}
	var r io.Reader
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "quoted-printable":
		r = quotedprintable.NewReader(body)
	case "base64":
		r = base64.NewDecoder(base64.StdEncoding, body)
	default:
		r = body
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("%s body (%s): %w", mediaType, encoding, err)
	}
	switch {
	case mediaType == "text/plain" && m.Text == "":
		m.Text = strings.ReplaceAll(string(b), "\r\n", "\n")
	case mediaType == "text/html" && m.HTML == "":
		m.HTML = strings.ReplaceAll(string(b), "\r\n", "\n")
	}
	return nil
}
