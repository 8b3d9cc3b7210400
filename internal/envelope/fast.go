package envelope

import (
	"bytes"
	"time"
	"unicode/utf8"
)

// decodeFast parses body into m when body is in the plain form Encode
// writes: one object with this package's exact field names, each at most
// once, strings with no escapes but JSON's short ones and \u outside the
// surrogates, integers without fraction or exponent, no null, nothing but
// white space after it. For anything else it reports false, and m is
// then undefined: Decode parses the body again with encoding/json, which
// alone decides what other forms mean or why they are refused. Where
// decodeFast says yes, encoding/json must give the same message
// (FuzzDecodeFastAgrees).
//
// Why it exists: encoding/json's reflection and its second scan were 18%
// of the consumer's CPU in the no-op run's profile (issue 22): 6.4 µs a
// body, where Decode now takes 1.8 (docs/performance.md, ninth pass).
func decodeFast(body []byte, m *Message) bool {
	p := parser{b: body}
	if !p.object(func(key []byte) bool { return p.field(key, m) }) {
		return false
	}
	p.ws()
	return p.i == len(p.b)
}

// field reads the value of Message's field named key. A name it does not
// know exactly (encoding/json matches case-insensitively) or one already
// read (encoding/json merges some repeats) is left to encoding/json.
func (p *parser) field(key []byte, m *Message) bool {
	switch string(key) {
	case "v":
		return p.once(0) && p.intTo(&m.Version)
	case "taskId":
		return p.once(1) && p.strTo(&m.TaskID)
	case "kind":
		var s string
		ok := p.once(2) && p.strTo(&s)
		m.Kind = Kind(s)
		return ok
	case "channel":
		return p.once(3) && p.strTo(&m.Channel)
	case "recipient":
		return p.once(4) && p.strTo(&m.Recipient)
	case "recipients":
		m.Recipients = []Recipient{}
		return p.once(5) && p.array(func() bool {
			var r Recipient
			var seen uint8
			ok := p.object(func(k []byte) bool {
				switch string(k) {
				case "taskId":
					return first(&seen, 1) && p.strTo(&r.TaskID)
				case "recipient":
					return first(&seen, 2) && p.strTo(&r.Recipient)
				}
				return false
			})
			m.Recipients = append(m.Recipients, r)
			return ok
		})
	case "batchId":
		return p.once(6) && p.strTo(&m.BatchID)
	case "robot":
		return p.once(7) && p.boolTo(&m.Robot)
	case "mentions":
		m.Mentions = []string{}
		return p.once(8) && p.array(func() bool {
			var s string
			ok := p.strTo(&s)
			m.Mentions = append(m.Mentions, s)
			return ok
		})
	case "template":
		return p.once(9) && p.strTo(&m.Template)
	case "locale":
		return p.once(10) && p.strTo(&m.Locale)
	case "variables":
		m.Variables = map[string]string{}
		return p.once(11) && p.object(func(k []byte) bool {
			// A key repeated here is as encoding/json has it: the last wins.
			name, ok := unquote(k)
			var v string
			ok = ok && p.strTo(&v)
			m.Variables[name] = v
			return ok
		})
	case "purpose":
		return p.once(12) && p.strTo(&m.Purpose)
	case "sealedCode":
		return p.once(13) && p.strTo(&m.SealedCode)
	case "codeDigest":
		return p.once(14) && p.strTo(&m.CodeDigest)
	case "deadline":
		m.Deadline = new(time.Time)
		return p.once(15) && p.timeTo(m.Deadline)
	case "callbackUrl":
		return p.once(16) && p.strTo(&m.CallbackURL)
	case "priority":
		var n int
		ok := p.once(17) && p.intTo(&n) && n >= 0 && n <= 255
		m.Priority = uint8(n)
		return ok
	case "tenant":
		return p.once(18) && p.strTo(&m.Tenant)
	case "account":
		return p.once(19) && p.strTo(&m.Account)
	case "media":
		md := &Media{}
		m.Media = md
		var seen uint8
		return p.once(20) && p.object(func(k []byte) bool {
			switch string(k) {
			case "type":
				return first(&seen, 1) && p.strTo(&md.Type)
			case "url":
				return first(&seen, 2) && p.strTo(&md.URL)
			case "filename":
				return first(&seen, 4) && p.strTo(&md.Filename)
			}
			return false
		})
	case "level":
		return p.once(21) && p.strTo(&m.Level)
	case "createdAt":
		return p.once(22) && p.timeTo(&m.CreatedAt)
	case "attempt":
		return p.once(23) && p.intTo(&m.Attempt)
	}
	return false
}

// once reports whether Message's field number n is read for the first
// time.
func (p *parser) once(n uint) bool { return first(&p.seen, 1<<n) }

func first[T uint8 | uint32](seen *T, bit T) bool {
	if *seen&bit != 0 {
		return false
	}
	*seen |= bit
	return true
}

// parser reads JSON from b at i. Every method skips the white space before
// its token and reports false for anything it does not take.
type parser struct {
	b    []byte
	i    int
	seen uint32 // Message's fields read (once)
}

func (p *parser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// next consumes c if it comes next.
func (p *parser) next(c byte) bool {
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// object reads {"key": value, ...}, handing each key, as written between
// its quotes, to member, which reads the value.
func (p *parser) object(member func(key []byte) bool) bool {
	if !p.next('{') {
		return false
	}
	if p.next('}') {
		return true
	}
	for {
		key, ok := p.raw()
		if !ok || !p.next(':') || !member(key) {
			return false
		}
		if p.next(',') {
			continue
		}
		return p.next('}')
	}
}

// array reads [elem, ...].
func (p *parser) array(elem func() bool) bool {
	if !p.next('[') {
		return false
	}
	if p.next(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if p.next(',') {
			continue
		}
		return p.next(']')
	}
}

// raw reads a string and returns what is between its quotes, escapes
// undone or not.
func (p *parser) raw() ([]byte, bool) {
	p.ws()
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, false
	}
	start := p.i + 1
	for j := start; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			p.i = j + 1
			return p.b[start:j], true
		case c == '\\':
			if j+1 < len(p.b) {
				j++ // the escaped byte cannot end the string
			}
		case c < 0x20:
			return nil, false // JSON has no raw control characters in strings
		}
	}
	return nil, false
}

func (p *parser) strTo(dst *string) bool {
	r, ok := p.raw()
	if !ok {
		return false
	}
	*dst, ok = unquote(r)
	return ok
}

// unquote undoes the escapes of r, a string's inside.
func unquote(r []byte) (string, bool) {
	j := 0
	for j < len(r) && r[j] != '\\' {
		j++
	}
	if j == len(r) {
		return string(r), true
	}
	out := make([]byte, j, len(r))
	copy(out, r[:j])
	for j < len(r) {
		c := r[j]
		if c != '\\' {
			out = append(out, c)
			j++
			continue
		}
		if j+1 >= len(r) {
			return "", false
		}
		switch r[j+1] {
		case '"', '\\', '/':
			out = append(out, r[j+1])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			if j+6 > len(r) {
				return "", false
			}
			var cp rune
			for _, h := range r[j+2 : j+6] {
				switch {
				case h >= '0' && h <= '9':
					cp = cp<<4 | rune(h-'0')
				case h >= 'a' && h <= 'f':
					cp = cp<<4 | rune(h-'a'+10)
				case h >= 'A' && h <= 'F':
					cp = cp<<4 | rune(h-'A'+10)
				default:
					return "", false
				}
			}
			if utf8.RuneLen(cp) < 0 {
				return "", false // a surrogate: pairs and strays are encoding/json's business
			}
			out = utf8.AppendRune(out, cp)
			j += 6
			continue
		default:
			return "", false
		}
		j += 2
	}
	return string(out), true
}

// intTo reads an integer of at most 15 digits: no fraction, no exponent.
func (p *parser) intTo(dst *int) bool {
	p.ws()
	neg := p.i < len(p.b) && p.b[p.i] == '-'
	if neg {
		p.i++
	}
	start := p.i
	var n int
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		n = n*10 + int(p.b[p.i]-'0')
		p.i++
	}
	digits := p.i - start
	if digits == 0 || digits > 15 || (digits > 1 && p.b[start] == '0') {
		return false
	}
	if p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		return false
	}
	if neg {
		n = -n
	}
	*dst = n
	return true
}

func (p *parser) boolTo(dst *bool) bool {
	p.ws()
	switch {
	case len(p.b)-p.i >= 4 && string(p.b[p.i:p.i+4]) == "true":
		p.i += 4
		*dst = true
	case len(p.b)-p.i >= 5 && string(p.b[p.i:p.i+5]) == "false":
		p.i += 5
		*dst = false
	default:
		return false
	}
	return true
}

// timeTo reads a time as encoding/json does, by the quoted text's
// time.Time.UnmarshalJSON; a text with escapes is left to encoding/json.
func (p *parser) timeTo(dst *time.Time) bool {
	p.ws()
	start := p.i
	r, ok := p.raw()
	if !ok || bytes.IndexByte(r, '\\') >= 0 {
		return false
	}
	return dst.UnmarshalJSON(p.b[start:p.i]) == nil
}
