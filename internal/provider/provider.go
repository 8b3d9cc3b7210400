package provider

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Class says what a failure means for the message.
type Class string

// Failure classes.
const (
	// Transient: the same message may succeed later (timeouts, 4xx SMTP
	// replies, vendor 5xx, connection errors).
	Transient Class = "transient"
	// Throttled: the vendor refused because of rate or quota; retry after a
	// longer wait (seed 004: rate-limited errors back off longer).
	Throttled Class = "throttled"
	// Permanent: retrying cannot help (invalid recipient, auth failure,
	// template rejected, 5xx SMTP replies).
	Permanent Class = "permanent"
)

// Sentinels for errors.Is on an *Error.
var (
	ErrTransient = errors.New("transient provider failure")
	ErrThrottled = errors.New("provider throttled the request")
	ErrPermanent = errors.New("permanent provider failure")
)

// Error is a classified provider failure.
type Error struct {
	Provider   string        // e.g. "smtp", "aliyun"
	Class      Class         // what retrying can do
	Code       string        // the vendor's code: "550", "isv.BUSINESS_LIMIT_CONTROL", "20429"
	Message    string        // the vendor's text, trimmed; never the message body
	RetryAfter time.Duration // the vendor's hint, if it gave one
	Err        error         // the underlying error, if any
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s: %s failure", e.Provider, e.Class)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Err != nil && e.Message == "" {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Is lets errors.Is(err, ErrTransient) and friends match by class. A
// throttled error is also transient: it may succeed later.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrTransient:
		return e.Class == Transient || e.Class == Throttled
	case ErrThrottled:
		return e.Class == Throttled
	case ErrPermanent:
		return e.Class == Permanent
	}
	return false
}

// Classify returns err's class; an unclassified error is transient, so an
// unknown failure is retried (bounded by MAX_RETRIES) rather than lost.
func Classify(err error) Class {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Class
	}
	return Transient
}

// Mail is one rendered email.
type Mail struct {
	To      string
	Subject string
	HTML    string
	Text    string
	// TaskID identifies the message; mailers put it in the Message-ID so a
	// receiving system can spot a duplicate.
	TaskID string
	// ListUnsubscribe, when set, is the notice's one-click unsubscribe
	// URL (RFC 8058): the mailer adds List-Unsubscribe with it and
	// List-Unsubscribe-Post. Codes and high notices leave it empty.
	ListUnsubscribe string
}

// SMS is one rendered text message.
type SMS struct {
	To     string // E.164, e.g. +8613900001234
	Text   string // rendered text, for vendors that take free text
	TaskID string
	// Template and Params are msgpulse's template code and variables, for
	// vendors (Aliyun, Tencent) that send only pre-registered templates.
	Template string
	Params   map[string]string
}

// WeCom is one rendered WeCom message: an application message to up to
// 1000 users in one call, or a post of a group robot.
type WeCom struct {
	Robot    string   // the robot's name (WECOM_ROBOTS); empty for an application message
	Account  string   // application message: the account (WECOM_ACCOUNTS) it is sent from; "" = default
	MediaID  string   // application message of Format image, file or video: WeCom's media_id
	ToUsers  []string // application message: userids
	Format   string   // text or markdown
	Content  string
	Mentions []string // robot: userids to mention, or @all
	TaskID   string
	Tenant   string // the sender's tenant: a robot refuses other tenants' posts

	// Title, Description and URL: application message of Format textcard
	// or news (one article).
	Title, Description, URL string
}

// WeComReceipt is what WeCom said when it accepted a message. Rejected
// holds the users it refused for good (invaliduser, unlicenseduser), with
// the reason; the others got it.
type WeComReceipt struct {
	Receipt
	Rejected map[string]string
}

// Receipt is what a vendor said when it accepted a message.
type Receipt struct {
	Provider  string
	MessageID string // the vendor's id, for support tickets
}

// Mailer sends email.
type Mailer interface {
	Name() string
	SendMail(ctx context.Context, m Mail) (Receipt, error)
}

// SMSSender sends text messages.
type SMSSender interface {
	Name() string
	SendSMS(ctx context.Context, m SMS) (Receipt, error)
}

// WeComSender sends WeCom application messages and robot posts.
type WeComSender interface {
	Name() string
	SendWeCom(ctx context.Context, m WeCom) (WeComReceipt, error)
}

// Closer is implemented by providers that hold connections.
type Closer interface{ Close() error }
