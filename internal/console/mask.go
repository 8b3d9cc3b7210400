package console

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/msgpulse/msgpulse/internal/dlq"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/logging"
)

// Masking is by allow-list: a field of a message (internal/envelope) or
// of a status record is shown in full only if it is named here, because
// it never holds a recipient or anything a tenant chose freely to send.
// Every other value is masked (logging.Mask), wherever it sits: a
// recipient, a batch's recipients[].recipient, mentions, callbackUrl,
// variables, and any field added later, until someone decides to list
// it here.
var shownInFull = map[string]bool{
	"v": true, "taskId": true, "batchId": true, "kind": true, "channel": true, "robot": true,
	"level": true, "priority": true, "template": true, "templateCode": true, "locale": true, "purpose": true,
	"status": true, "reason": true, "errorClass": true, "provider": true, "tenant": true,
	"createdAt": true, "updatedAt": true, "scheduledAt": true, "sentAt": true, "deadline": true,
	"attempt": true, "attempts": true, "traceId": true,
}

// shownInFullIn are the fields shown in full inside a nested object, by
// the path of that object: a batch member's own taskId. Anywhere else
// below the top level nothing is allow-listed, so a variable that happens
// to be called "status" is masked like any other.
var shownInFullIn = map[string]map[string]bool{"recipients[]": {"taskId": true}}

// hiddenFields are never shown at all, not even masked: a code's seal and
// its digest.
var hiddenFields = map[string]bool{"sealedCode": true, "codeDigest": true}

// freeText fields are error texts: shown, since on-call needs them, with
// anything that looks like a recipient (and every recipient the message
// names) masked in them.
var freeText = map[string]bool{"lastError": true, "error": true, "malformed": true}

const hidden = "[hidden]"

// maskJSON returns v (a decoded JSON value at path: "" for the document,
// else the keys down to it, "[]" for an array's members) with every value
// outside the allow-list masked; known collects the full strings it
// masked, so error texts can be cleaned of them. Object keys are shown:
// they are field and variable names.
func maskJSON(v any, path string, known *[]string) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, val := range x {
			top := path == ""
			switch {
			case hiddenFields[k]:
				out[k] = hidden
			case (top && shownInFull[k] || shownInFullIn[path][k]) && scalar(val):
				out[k] = val
			case top && freeText[k]:
				if s, ok := val.(string); ok {
					out[k] = s // cleaned below, once every recipient is known
				} else {
					out[k] = maskJSON(val, k, known)
				}
			default:
				out[k] = maskJSON(val, strings.TrimPrefix(path+"."+k, "."), known)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, val := range x {
			out[i] = maskJSON(val, path+"[]", known)
		}
		return out
	case string:
		*known = append(*known, x)
		return logging.Mask(x)
	case nil, bool:
		return x
	default: // a number: it could be a phone number
		s := fmt.Sprint(x)
		if f, ok := x.(float64); ok {
			s = strconv.FormatFloat(f, 'f', -1, 64) // 13800138000, not 1.38e+10
		}
		*known = append(*known, s)
		return logging.Mask(s)
	}
}

func scalar(v any) bool {
	switch v.(type) {
	case map[string]any, []any:
		return false
	}
	return true
}

// maskDocument masks a decoded JSON document and cleans its free-text
// fields of every value it masked; it returns the masked strings too.
func maskDocument(v any) (any, []string) {
	var known []string
	out := maskJSON(v, "", &known)
	cleanFreeText(out, known)
	return out, known
}

// cleanFreeText scrubs the document's top-level free-text fields.
func cleanFreeText(v any, known []string) {
	if m, ok := v.(map[string]any); ok {
		for k, val := range m {
			if s, ok := val.(string); ok && freeText[k] {
				m[k] = scrub(s, known)
			}
		}
	}
}

// Recipient-like text in free text: e-mail addresses, phone numbers (7
// or more digits, maybe with +, spaces or dashes; a date is caught too,
// which costs little in an error text) and URLs.
var (
	emailRe = regexp.MustCompile(`[^\s@"'<>(),;:\[\]]+@[^\s@"'<>(),;:\[\]]+`)
	phoneRe = regexp.MustCompile(`\+?\d[\d\- ]{5,}\d`)
	urlRe   = regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.-]*://[^\s"'<>]*[^\s"'<>.,;:)]`) // not the sentence's punctuation
)

// scrub masks in s every known value where it stands as a word of its
// own (longest first, so one that contains another is masked whole; a
// variable "mail" leaves "mailbox" alone), then anything that looks like
// a recipient.
func scrub(s string, known []string) string {
	if s == "" {
		return s
	}
	ks := append([]string(nil), known...)
	sort.Slice(ks, func(i, j int) bool { return len(ks[i]) > len(ks[j]) })
	for _, k := range ks {
		if len(k) >= 3 {
			s = replaceWord(s, k, logging.Mask(k))
		}
	}
	for _, re := range []*regexp.Regexp{urlRe, emailRe, phoneRe} {
		s = re.ReplaceAllStringFunc(s, logging.Mask)
	}
	return s
}

// replaceWord replaces each occurrence of w in s that no letter, digit,
// '.', '_' or '-' touches on either side.
func replaceWord(s, w, with string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, w)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		end := i + len(w)
		before, _ := utf8.DecodeLastRuneInString(s[:i])
		after, _ := utf8.DecodeRuneInString(s[end:])
		if (i == 0 || !wordRune(before)) && (end == len(s) || !wordRune(after)) {
			b.WriteString(s[:i])
			b.WriteString(with)
		} else {
			b.WriteString(s[:end])
		}
		s = s[end:]
	}
}

func wordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '_' || r == '-'
}

// maskEntry masks what a dead letter's list row (or detail summary) shows
// beyond the allow-list: the recipient (already masked by dlq; masking
// is idempotent on its output) and the error texts.
func maskEntry(e *dlq.Entry, known []string) {
	e.Recipient = logging.Mask(e.Recipient)
	e.LastError = scrub(e.LastError, known)
	e.Malformed = scrub(e.Malformed, known)
}

// maskEntries masks a list page's rows.
func maskEntries(es []dlq.Entry) {
	for i := range es {
		maskEntry(&es[i], nil)
	}
}

// headersInFull are the AMQP headers msgpulse and RabbitMQ set, none of
// which holds a recipient; any other header's value is masked.
var headersInFull = map[string]bool{
	envelope.HeaderSchema: true, envelope.HeaderDeadline: true, envelope.HeaderDueAt: true, envelope.HeaderDelay: true,
	envelope.HeaderHops: true, envelope.HeaderPlanLeft: true, envelope.HeaderTargetExchange: true, envelope.HeaderTargetKey: true,
	envelope.HeaderReplays: true, envelope.HeaderRetryOf: true, envelope.HeaderCC: true, envelope.HeaderDeliveryCount: true,
}

func headerInFull(name string) bool {
	return headersInFull[name] || strings.HasPrefix(name, envelope.HeaderFirstDeathPfx) || strings.HasPrefix(name, envelope.HeaderLastDeathPfx)
}

// maskRecord is a status record as the lookup page shows it: its JSON
// fields by name, masked by the same allow-list.
func maskRecord(rec any) (map[string]any, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	out, _ := maskDocument(m)
	return out.(map[string]any), nil
}
