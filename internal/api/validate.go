package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/mail"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/phone"
	"github.com/msgpulse/msgpulse/internal/provider/wecom"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/template"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// API channel names (topology's vocabulary table says what each is to
// the queues and the templates).
const (
	chEmail      = "email"
	chSMS        = "sms"
	chWeCom      = "wecom"       // WeCom application messages, to userids
	chWeComRobot = "wecom_robot" // WeCom group robots, by name
)

// names is apiChannel's row of the channel vocabulary; the API validates
// channels before it asks.
func names(apiChannel string) topology.Names {
	n, _ := topology.ByAPI(apiChannel)
	return n
}

func topologyChannel(apiChannel string) string { return names(apiChannel).Queue }

// templateChannel is the template channel an API channel renders with.
func templateChannel(apiChannel string) template.Channel {
	return template.Channel(names(apiChannel).Template)
}

// messageTypes maps messageType to its API channel.
var messageTypes = map[string]string{"EMAIL": chEmail, "SMS": chSMS, "WECOM": chWeCom, "WECOM_ROBOT": chWeComRobot}

var (
	slug    = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
	varName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,63}$`)
	codeRE  = regexp.MustCompile(`^[0-9]{4,10}$`)
	robot   = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
)

// noControl rejects CR, LF and other control characters, which could
// split a mail header or a log line.
func noControl(field, v string) *apiError {
	if !utf8.ValidString(v) {
		return badRequest("%s is not valid UTF-8", field)
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			if r == '\r' || r == '\n' {
				return badRequest("%s must not contain CR or LF", field)
			}
			return badRequest("%s must not contain control characters", field)
		}
	}
	return nil
}

func checkChannel(ch string) *apiError {
	if ch != chEmail && ch != chSMS {
		return badRequest("channel must be \"email\" or \"sms\"")
	}
	return nil
}

// normalizeRecipient validates a recipient for its channel and returns the
// form used for keys and sending: email lower-cased, phone as E.164.
func normalizeRecipient(channel, r string) (string, *apiError) {
	rec, _, e := recipientOf(channel, r)
	return rec, e
}

// recipientOf is normalizeRecipient that also returns an SMS recipient's
// parsed number (zero for other channels).
func recipientOf(channel, r string) (string, phone.Number, *apiError) {
	if r == "" {
		return "", phone.Number{}, badRequest("recipient is required")
	}
	if e := noControl("recipient", r); e != nil {
		return "", phone.Number{}, e
	}
	if channel == chSMS {
		// Parsed, not matched: a number must be one its country assigns,
		// and has one form (E.164) whatever its spacing, so no spelling
		// of it is a recipient of its own to the limits.
		n, err := phone.Parse(r)
		if err != nil {
			return "", n, badRequest("recipient %v", err)
		}
		return n.E164, n, nil
	}
	rec, e := otherRecipient(channel, r)
	return rec, phone.Number{}, e
}

func otherRecipient(channel, r string) (string, *apiError) {
	switch channel {
	case chWeCom:
		if !wecom.ValidUserID(r) {
			return "", badRequest("recipient must be " + wecom.UserIDRule)
		}
		return r, nil
	case chWeComRobot:
		if !robot.MatchString(r) {
			return "", badRequest("recipient must be the name of a WeCom robot (WECOM_ROBOTS), such as ops")
		}
		return r, nil
	}
	if len(r) > 254 {
		return "", badRequest("recipient is longer than 254 characters")
	}
	addr, err := mail.ParseAddress(r)
	if err != nil || addr.Name != "" || addr.Address != r {
		return "", badRequest("recipient must be a bare email address such as alice@example.com")
	}
	local, domain, _ := strings.Cut(r, "@")
	if len(local) > 64 || strings.ContainsAny(local, "\" ") || !isHostname(domain) {
		return "", badRequest("recipient must be a bare email address such as alice@example.com")
	}
	return strings.ToLower(r), nil
}

func checkPurpose(p string) *apiError {
	if !slug.MatchString(p) {
		return badRequest("purpose must be a lower-case slug of at most 32 characters, such as register, login or reset_password")
	}
	return nil
}

// emailIdentity is who an address (lower-cased, valid) is to the
// per-recipient limits and the cooldown: the mailbox, whatever tag rides
// on it. Sending still goes to the address as given.
//   - Subaddressing (RFC 5233): alice+anything@example.com is alice's
//     mailbox at nearly every provider (Gmail, Outlook, iCloud, Fastmail,
//     Proton, Postfix's and Exim's defaults), so the +tag is dropped.
//   - Gmail, the one provider-specific rule: it ignores dots in the local
//     part and googlemail.com is gmail.com, so a.l.i.c.e@googlemail.com is
//     alice@gmail.com.
func emailIdentity(addr string) string {
	local, domain, ok := strings.Cut(addr, "@")
	if !ok {
		return addr
	}
	if i := strings.IndexByte(local, '+'); i > 0 {
		local = local[:i]
	}
	if domain == "gmail.com" || domain == "googlemail.com" {
		local, domain = strings.ReplaceAll(local, ".", ""), "gmail.com"
		if local == "" {
			return addr
		}
	}
	return local + "@" + domain
}

// clientKey turns the end user's IP into its rate-limit key: the address
// for IPv4, the /64 for IPv6 (one subscriber usually holds a whole /64),
// as the wrong-key limit counts sources (ratelimit.Source).
func clientKey(ip string) (string, *apiError) {
	if ip == "" {
		return "", nil
	}
	if net.ParseIP(ip) == nil {
		return "", badRequest("clientIp %q is not an IP address", truncate(ip, 64))
	}
	return ratelimit.Source(ip), nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// VerificationCodeRequest is the body of POST /api/verification-codes.
type VerificationCodeRequest struct {
	Channel   string `json:"channel"`
	Recipient string `json:"recipient"`
	Purpose   string `json:"purpose"`
	Locale    string `json:"locale,omitempty"`
	ClientIP  string `json:"clientIp,omitempty"`

	number phone.Number // an SMS recipient, parsed
	// limitAs is who the per-recipient limits and the cooldown count the
	// recipient as: an email address's identity (emailIdentity), else the
	// recipient.
	limitAs string
}

// checkTarget validates what a code belongs to (channel, recipient,
// purpose) and returns the normalised recipient, and its number for SMS.
func checkTarget(channel, recipient, purpose string) (string, phone.Number, *apiError) {
	if e := checkChannel(channel); e != nil {
		return "", phone.Number{}, e
	}
	rec, n, e := recipientOf(channel, recipient)
	if e != nil {
		return "", n, e
	}
	return rec, n, checkPurpose(purpose)
}

// validate checks and normalises the request in place.
func (r *VerificationCodeRequest) validate(locales func(string) bool) *apiError {
	rec, n, e := checkTarget(r.Channel, r.Recipient, r.Purpose)
	if e != nil {
		return e
	}
	r.Recipient, r.number = rec, n
	r.limitAs = rec
	if r.Channel == chEmail {
		r.limitAs = emailIdentity(rec)
	}
	if r.Locale != "" && !locales(r.Locale) {
		return badRequest("locale %q is not available", truncate(r.Locale, 16))
	}
	if _, e := clientKey(r.ClientIP); e != nil {
		return e
	}
	return nil
}

// VerifyRequest is the body of POST /api/verification-codes/verify.
type VerifyRequest struct {
	Channel   string `json:"channel"`
	Recipient string `json:"recipient"`
	Purpose   string `json:"purpose"`
	Code      string `json:"code"`

	number phone.Number // an SMS recipient, parsed
}

func (r *VerifyRequest) validate() *apiError {
	rec, n, e := checkTarget(r.Channel, r.Recipient, r.Purpose)
	if e != nil {
		return e
	}
	r.Recipient, r.number = rec, n
	if !codeRE.MatchString(r.Code) {
		return badRequest("code must be 4 to 10 digits")
	}
	return nil
}

// Message is what a message says, whoever gets it: the fields a send
// and a batch share.
type Message struct {
	MessageType  string            `json:"messageType"`
	TemplateCode string            `json:"templateCode"`
	Variables    map[string]string `json:"variables"`
	Locale       string            `json:"locale,omitempty"`
	// Priority is a level ("high", "normal", "low") or seed 004's 0–9.
	Priority     json.RawMessage `json:"priority,omitempty"`
	CallbackURL  string          `json:"callbackUrl,omitempty"`
	DelaySeconds *float64        `json:"delaySeconds,omitempty"`
	SendAt       *string         `json:"sendAt,omitempty"`
	// TTLSeconds is the deadline after the message is due.
	TTLSeconds *float64 `json:"ttlSeconds,omitempty"`
	// Mentions: for WECOM_ROBOT, the userids the robot mentions, or @all.
	Mentions []string `json:"mentions,omitempty"`
	// Account: for WECOM, the WeCom application account (WECOM_ACCOUNTS)
	// to send from; default: the first listed for the caller's tenant,
	// else default.
	Account string `json:"account,omitempty"`
	// Media: for WECOM, a file sent instead of a template.
	Media *Media `json:"media,omitempty"`

	account string         // Account as resolved for the caller's tenant
	channel string         // email, sms, wecom or wecom_robot, from MessageType
	delay   time.Duration  // 0 = now
	level   topology.Level // from Priority; normal by default
	number  *int           // Priority when given as a number
	ttl     time.Duration  // 0 = MESSAGE_MAX_AGE
}

// SendRequest is the body of POST /api/messages/send.
type SendRequest struct {
	Message
	Recipient string `json:"recipient"`
}

const maxMentions = 100

const (
	maxVariables     = 32
	maxVariableBytes = 4096
)

func (r *SendRequest) validate(locales func(string) bool, allowHTTP bool, now time.Time) *apiError {
	if e := r.validateCommon(locales, allowHTTP, now); e != nil {
		return e
	}
	rec, e := normalizeRecipient(r.channel, r.Recipient)
	if e != nil {
		return e
	}
	r.Recipient = rec
	return nil
}

// validateCommon checks everything but the recipients.
func (r *Message) validateCommon(locales func(string) bool, allowHTTP bool, now time.Time) *apiError {
	ch, ok := messageTypes[r.MessageType]
	if !ok {
		return badRequest("messageType must be \"EMAIL\", \"SMS\", \"WECOM\" or \"WECOM_ROBOT\"")
	}
	r.channel = ch
	if r.Media != nil {
		if e := r.Media.validate(r.channel, r.TemplateCode, allowHTTP); e != nil {
			return e
		}
	} else if !slug.MatchString(r.TemplateCode) {
		return badRequest("templateCode must be a template name such as notice or verify_code")
	}
	if len(r.Mentions) > 0 && r.channel != chWeComRobot {
		return badRequest("mentions are for WECOM_ROBOT messages only")
	}
	if r.Account != "" && r.channel != chWeCom {
		return badRequest("account is for WECOM messages only")
	}
	if r.Account != "" && !robot.MatchString(r.Account) {
		return badRequest("account must be the name of a WeCom account (WECOM_ACCOUNTS): 1 to 64 letters, digits, _ or -")
	}
	if len(r.Mentions) > maxMentions {
		return badRequest("at most %d mentions", maxMentions)
	}
	for _, m := range r.Mentions {
		if m != wecom.MentionAll && !wecom.ValidUserID(m) {
			return badRequest("mention %q must be a WeCom userid or @all", truncate(m, 64))
		}
	}
	if len(r.Variables) > maxVariables {
		return badRequest("at most %d variables", maxVariables)
	}
	for k, v := range r.Variables {
		if !varName.MatchString(k) {
			return badRequest("variable name %q must be letters, digits and _, starting with a letter", truncate(k, 64))
		}
		if len(v) > maxVariableBytes {
			return badRequest("variable %s is longer than %d bytes", k, maxVariableBytes)
		}
		if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
			return badRequest("variable %s must be valid UTF-8 text", k)
		}
	}
	if r.Locale != "" && !locales(r.Locale) {
		return badRequest("locale %q is not available", truncate(r.Locale, 16))
	}
	if e := r.parsePriority(); e != nil {
		return e
	}
	if r.TTLSeconds != nil {
		d := *r.TTLSeconds
		if math.IsNaN(d) || math.IsInf(d, 0) || d < 1 || d > float64(maxTTL/time.Second) {
			return badRequest("ttlSeconds must be a number of seconds from 1 to %d", int64(maxTTL/time.Second))
		}
		r.ttl = time.Duration(d * float64(time.Second))
	}
	if r.CallbackURL != "" {
		if e := checkCallback(r.CallbackURL, allowHTTP); e != nil {
			return e
		}
	}
	switch {
	case r.DelaySeconds != nil && r.SendAt != nil:
		return badRequest("give delaySeconds or sendAt, not both")
	case r.DelaySeconds != nil:
		d := *r.DelaySeconds
		if math.IsNaN(d) || math.IsInf(d, 0) || d <= 0 {
			return badRequest("delaySeconds must be a positive number")
		}
		if d > float64(math.MaxInt64/int64(time.Second)) {
			return badRequest("delaySeconds %g is too large", d)
		}
		r.delay = time.Duration(d * float64(time.Second))
		if r.delay < time.Millisecond {
			return badRequest("delaySeconds must be at least 0.001")
		}
	case r.SendAt != nil:
		at, err := time.Parse(time.RFC3339Nano, *r.SendAt)
		if err != nil {
			return badRequest("sendAt must be an RFC 3339 time such as 2026-11-21T08:00:00Z")
		}
		if !at.After(now) {
			return badRequest("sendAt %s is not in the future", *r.SendAt)
		}
		r.delay = at.Sub(now)
	}
	return nil
}

// maxTTL bounds ttlSeconds: a deadline further out than the status record
// lives says nothing.
const maxTTL = 30 * 24 * time.Hour

// parsePriority reads priority: a level name, or seed 004's integer scale
// (0–3 low, 4–6 normal, 7–9 high). Absent means normal.
func (r *Message) parsePriority() *apiError {
	r.level = topology.Normal
	raw := bytes.TrimSpace(r.Priority)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	const want = `priority must be "high", "normal", "low" or an integer from 0 to 9`
	var name string
	if json.Unmarshal(raw, &name) == nil {
		l, err := topology.ParseLevel(name)
		if err != nil {
			return badRequest(want)
		}
		r.level = l
		return nil
	}
	var n int
	if json.Unmarshal(raw, &n) != nil || n < 0 || n > 9 {
		return badRequest(want)
	}
	r.number = &n
	switch {
	case n >= 7:
		r.level = topology.High
	case n >= 4:
		r.level = topology.Normal
	default:
		r.level = topology.Low
	}
	return nil
}

func checkCallback(raw string, allowHTTP bool) *apiError {
	if len(raw) > 2048 {
		return badRequest("callbackUrl is longer than 2048 characters")
	}
	u, err := url.Parse(raw)
	secure := u != nil && (u.Scheme == "https" || (allowHTTP && u.Scheme == "http"))
	if err != nil || u.Host == "" || !secure {
		if allowHTTP {
			return badRequest("callbackUrl must be an absolute http(s) URL")
		}
		return badRequest("callbackUrl must be an absolute https URL")
	}
	return nil
}

// checkCallbackKey refuses a callbackUrl whose tenant has no callback key:
// the consumer could not sign its callbacks, and must never sign them with
// another tenant's key or with CODE_SECRET.
func (s *Server) checkCallbackKey(caller apikey.Key, callbackURL string) *apiError {
	if callbackURL == "" {
		return nil
	}
	if _, err := s.opts.CallbackKeys.For(caller.Tenant); err != nil {
		return badRequest("callbackUrl: tenant %s has no callback key; set CALLBACK_SECRETS (tenant=secret,…) or CALLBACK_SECRET on the API and the consumer", caller.Tenant)
	}
	return nil
}

// checkCallbackHost refuses a callbackUrl whose host is, or resolves to, a
// loopback, link-local, private or other internal address: the consumer
// would POST there from inside the deployment. The consumer checks again
// when it dials.
func (s *Server) checkCallbackHost(ctx context.Context, raw string) *apiError {
	u, err := url.Parse(raw)
	if err != nil {
		return badRequest("callbackUrl must be an absolute https URL")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second) // a slow DNS must not hold the request
	defer cancel()
	if err := s.opts.Egress.CheckHost(ctx, u.Hostname()); err != nil {
		return badRequest("callbackUrl host refused: %v", err)
	}
	return nil
}

func describeDelay(d time.Duration) string {
	return fmt.Sprintf("%gs", d.Seconds())
}

// isHostname reports whether s is a DNS name of two labels or more, each
// 1 to 63 letters, digits or hyphens, neither starting nor ending with a
// hyphen. It is the regular expression
//
//	^(?i)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$
//
// (TestIsHostnameIsTheRegexp) by hand: the regexp's backtracker was 2% of
// the api's CPU per code request, every one of which has an address.
func isHostname(s string) bool {
	labels, start := 0, 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != '.' {
			c := s[i] | 0x20 // ASCII lower case; '-' and digits keep their meaning
			if (c < 'a' || c > 'z') && (s[i] < '0' || s[i] > '9') && s[i] != '-' {
				return false
			}
			continue
		}
		n := i - start
		if n < 1 || n > 63 || s[start] == '-' || s[i-1] == '-' {
			return false
		}
		labels++
		start = i + 1
	}
	return labels >= 2
}
