package client

import (
	"encoding/json"
	"errors"
	"time"
)

// Channel is the delivery channel of a verification code or a message.
type Channel string

// Channels.
const (
	ChannelEmail      Channel = "email"
	ChannelSMS        Channel = "sms"
	ChannelWeCom      Channel = "wecom"       // messages only
	ChannelWeComRobot Channel = "wecom_robot" // messages only
)

// MessageType is the kind of a templated message (SendRequest.MessageType).
// It is spelled in capitals, unlike Channel, because the contract says so.
type MessageType string

// Message types.
const (
	MessageEmail      MessageType = "EMAIL"
	MessageSMS        MessageType = "SMS"
	MessageWeCom      MessageType = "WECOM"       // a WeCom application message; Recipient is a userid
	MessageWeComRobot MessageType = "WECOM_ROBOT" // a WeCom group robot post; Recipient is the robot's name
)

// Locales the server renders codes in.
const (
	LocaleZhCN = "zh-CN"
	LocaleEn   = "en"
)

// Status is the delivery status of a message.
type Status string

// Statuses.
const (
	StatusQueued    Status = "queued"    // waiting in the broker
	StatusScheduled Status = "scheduled" // waiting for its send time
	StatusSending   Status = "sending"   // a consumer is sending it
	StatusSent      Status = "sent"      // the provider accepted it
	StatusRetrying  Status = "retrying"  // an attempt failed, another is planned
	StatusFailed    Status = "failed"    // no attempt can succeed
	StatusExpired   Status = "expired"   // it waited past its TTL

	// Set by receipts, what the provider reports after the send; no later
	// attempt undoes one.
	StatusDelivered   Status = "delivered"   // the handset took it (an SMS delivery report)
	StatusUndelivered Status = "undelivered" // the vendor reports it could not be delivered
	StatusBounced     Status = "bounced"     // a mail server reports a permanent failure (DSN 5.x.x)
	StatusComplained  Status = "complained"  // the reader marked it as spam (ARF)
)

// VerificationCodeRequest asks msgpulse to generate a code and send it.
type VerificationCodeRequest struct {
	Channel   Channel `json:"channel"`
	Recipient string  `json:"recipient"` // email address or phone number
	Purpose   string  `json:"purpose"`   // slug: register, login, reset_password...
	Locale    string  `json:"locale,omitempty"`
	// ClientIP is the end user's IP address, for per-IP limits.
	ClientIP string `json:"clientIp,omitempty"`
}

// VerificationCode is the answer to RequestVerificationCode.
type VerificationCode struct {
	TaskID      string    `json:"taskId"`
	Status      Status    `json:"status"`
	ExpiresAt   time.Time `json:"expiresAt"`   // when the code stops being valid
	ResendAfter time.Time `json:"resendAfter"` // from when another code may be requested
}

// VerifyRequest checks a code.
type VerifyRequest struct {
	Channel   Channel `json:"channel"`
	Recipient string  `json:"recipient"`
	Purpose   string  `json:"purpose"`
	Code      string  `json:"code"`
}

// VerifyResult says whether a code matched.
type VerifyResult struct {
	Valid        bool `json:"valid"`
	AttemptsLeft int  `json:"attemptsLeft"`
}

// SendRequest asks msgpulse to send a templated message. DelaySeconds and
// SendAt are mutually exclusive; leave both nil to send at once.
type SendRequest struct {
	MessageType  MessageType `json:"messageType"`
	TemplateCode string      `json:"templateCode"`
	Recipient    string      `json:"recipient"`
	// Variables fill the template; nil is sent as {} because the contract
	// requires the object.
	Variables map[string]string `json:"variables"`
	Locale    string            `json:"locale,omitempty"`
	// Priority is 0..9 (0–3 low, 4–6 normal, 7–9 high); a pointer because
	// 0 is a valid priority that must not be confused with "use the
	// server's default". Set it or Level, not both.
	Priority *int `json:"priority,omitempty"`
	// Level is the traffic level, sent as priority: LevelHigh, LevelNormal
	// (the server's default) or LevelLow.
	Level        Level      `json:"-"`
	CallbackURL  string     `json:"callbackUrl,omitempty"` // https only
	DelaySeconds *float64   `json:"delaySeconds,omitempty"`
	SendAt       *time.Time `json:"sendAt,omitempty"`
	// Mentions (WECOM_ROBOT only): userids the robot mentions, or "@all".
	Mentions []string `json:"mentions,omitempty"`
	// TTLSeconds is the message's deadline after it is due; nil = the
	// server's MESSAGE_MAX_AGE (24 h). Past it the message ends expired.
	TTLSeconds *float64 `json:"ttlSeconds,omitempty"`
	// Account (WECOM only) is the WeCom application to send from
	// (WECOM_ACCOUNTS); empty = the first listing the caller's tenant.
	Account string `json:"account,omitempty"`
	// Media (WECOM only) is a file sent instead of a template.
	Media *WeComMedia `json:"media,omitempty"`
}

// WeComMedia is an image, file or video a WeCom application message
// carries instead of a template; the consumer fetches URL and uploads it.
type WeComMedia struct {
	Type     string `json:"type"` // image, file or video
	URL      string `json:"url"`
	Filename string `json:"filename,omitempty"`
}

// BatchRequest is one message to 1 to 1000 recipients (SendBatch).
type BatchRequest struct {
	MessageType  MessageType       `json:"messageType"`
	TemplateCode string            `json:"templateCode"`
	Recipients   []string          `json:"recipients"`
	Variables    map[string]string `json:"variables,omitempty"`
	Locale       string            `json:"locale,omitempty"`
	Priority     *int              `json:"priority,omitempty"`
	// Level is sent as priority, as in SendRequest.
	Level        Level      `json:"-"`
	CallbackURL  string     `json:"callbackUrl,omitempty"`
	DelaySeconds *float64   `json:"delaySeconds,omitempty"`
	SendAt       *time.Time `json:"sendAt,omitempty"`
	Mentions     []string   `json:"mentions,omitempty"`
	TTLSeconds   *float64   `json:"ttlSeconds,omitempty"`
	// Account and Media: as in SendRequest.
	Account string      `json:"account,omitempty"`
	Media   *WeComMedia `json:"media,omitempty"`
}

// MarshalJSON sends Level, when set, as the priority field.
func (r BatchRequest) MarshalJSON() ([]byte, error) {
	type plain BatchRequest
	return withLevel(plain(r), r.Level, r.Priority)
}

// BatchResult is the answer to SendBatch: each accepted recipient's task,
// and why the others were rejected.
type BatchResult struct {
	BatchID     string          `json:"batchId"`
	Status      Status          `json:"status"`
	ScheduledAt *time.Time      `json:"scheduledAt,omitempty"`
	Accepted    []BatchAccepted `json:"accepted"`
	Rejected    []BatchRejected `json:"rejected"`
}

// BatchAccepted is an accepted recipient of a batch.
type BatchAccepted struct {
	Recipient string `json:"recipient"`
	TaskID    string `json:"taskId"`
}

// BatchRejected is a rejected recipient, with the status code and message
// a single send to it would have got.
type BatchRejected struct {
	Recipient string `json:"recipient"`
	Code      int    `json:"code"`
	Msg       string `json:"msg"`
}

// Batch counts a batch's recipients by status (GetBatch).
type Batch struct {
	BatchID string         `json:"batchId"`
	Total   int            `json:"total"`
	Counts  map[Status]int `json:"counts"`
	TaskIDs []string       `json:"taskIds"`
}

// Level is a notice's traffic level: each is its own queue, and consumers
// prefer high, then normal, then low. Verification codes have a queue of
// their own, which no notice enters.
type Level string

// Levels.
const (
	LevelHigh   Level = "high"
	LevelNormal Level = "normal"
	LevelLow    Level = "low"
)

// MarshalJSON sends Level, when set, as the priority field.
func (r SendRequest) MarshalJSON() ([]byte, error) {
	type plain SendRequest
	return withLevel(plain(r), r.Level, r.Priority)
}

// withLevel encodes a request (a JSON object with fields, Priority among
// them) and adds level as its priority field; the API takes a level's name
// or a number there, never both.
func withLevel(v any, level Level, priority *int) ([]byte, error) {
	if level != "" && priority != nil {
		return nil, errors.New("client: set Priority or Level, not both")
	}
	b, err := json.Marshal(v)
	if err != nil || level == "" {
		return b, err
	}
	l, err := json.Marshal(level)
	if err != nil {
		return nil, err
	}
	// b is a non-empty object: replace its closing brace.
	return append(append(b[:len(b)-1], `,"priority":`...), append(l, '}')...), nil
}

// SendResult is the answer to SendMessage.
type SendResult struct {
	TaskID      string     `json:"taskId"`
	Status      Status     `json:"status"`                // queued or scheduled
	ScheduledAt *time.Time `json:"scheduledAt,omitempty"` // set when scheduled
}

// Message is the delivery status of one message.
type Message struct {
	TaskID    string    `json:"taskId"`
	Status    Status    `json:"status"`
	Channel   Channel   `json:"channel"`
	Recipient string    `json:"recipient"` // masked by the server
	Attempts  int       `json:"attempts"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	LastError string    `json:"lastError"`

	// Optional fields: empty or nil when the server did not send them.
	Kind        string     `json:"kind,omitempty"`
	Template    string     `json:"template,omitempty"`
	ScheduledAt *time.Time `json:"scheduledAt,omitempty"`
	SentAt      *time.Time `json:"sentAt,omitempty"`
	ErrorClass  string     `json:"errorClass,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	Provider    string     `json:"provider,omitempty"`
	Priority    Level      `json:"priority,omitempty"` // the level it was queued at

	// What the receipt that set a receipt status said: its code (5.1.1,
	// Twilio's 30003), detail and source (dsn, arf, smtp, twilio, aliyun,
	// tencent); DeliveredAt is the handset's time, once delivered.
	ReceiptCode   string     `json:"receiptCode,omitempty"`
	ReceiptDetail string     `json:"receiptDetail,omitempty"`
	ReceiptSource string     `json:"receiptSource,omitempty"`
	DeliveredAt   *time.Time `json:"deliveredAt,omitempty"`
	// Events are the last 10 receipts, oldest first, including those that
	// changed no status.
	Events []ReceiptEvent `json:"events,omitempty"`
}

// ReceiptEvent is one receipt kept on a message: Kind is delivered,
// undelivered, bounced, complained, delayed or accepted.
type ReceiptEvent struct {
	Kind   string    `json:"kind"`
	Code   string    `json:"code,omitempty"`
	Detail string    `json:"detail,omitempty"`
	At     time.Time `json:"at"`
	Source string    `json:"source,omitempty"`
}

// StatusCallback is the JSON body of a status callback (read it with
// VerifyCallback): a message's final status, or a receipt's.
type StatusCallback struct {
	Event      string     `json:"event"` // "message.status"
	TaskID     string     `json:"taskId"`
	Status     Status     `json:"status"`
	Channel    Channel    `json:"channel"`
	Recipient  string     `json:"recipient"` // masked
	Attempts   int        `json:"attempts"`
	Provider   string     `json:"provider,omitempty"`
	SentAt     *time.Time `json:"sentAt,omitempty"`
	LastError  string     `json:"lastError,omitempty"`
	ErrorClass string     `json:"errorClass,omitempty"`
	Reason     string     `json:"reason,omitempty"`
	UpdatedAt  time.Time  `json:"updatedAt"`

	ReceiptCode   string     `json:"receiptCode,omitempty"`
	ReceiptDetail string     `json:"receiptDetail,omitempty"`
	ReceiptSource string     `json:"receiptSource,omitempty"`
	DeliveredAt   *time.Time `json:"deliveredAt,omitempty"`
}

// RateLimit is one rate-limit configuration. A limit of 0 means unlimited.
type RateLimit struct {
	// ID is a slug; CreateRateLimit lets the server generate it when empty.
	ID string `json:"id,omitempty"`
	// Provider is the provider it limits; nil is the global limit. It is
	// always sent (null included) because null is meaningful.
	Provider          *string `json:"provider"`
	RequestsPerSecond int     `json:"requestsPerSecond"`
	RequestsPerMinute int     `json:"requestsPerMinute"`
	RequestsPerHour   int     `json:"requestsPerHour"`
	RequestsPerDay    int     `json:"requestsPerDay"`
	IsEnabled         bool    `json:"isEnabled"`
}

// QueueStats lists every queue of msgpulse's topology.
type QueueStats struct {
	Queues []QueueStat `json:"queues"`
	// WeComAccounts is every WeCom application account and its state.
	WeComAccounts []WeComAccountState `json:"wecomAccounts,omitempty"`
}

// WeComAccountState is one WeCom account's health and whether WeCom
// refuses its credentials (down).
type WeComAccountState struct {
	Account       string     `json:"account"`
	Status        string     `json:"status"` // up or down
	DownReason    string     `json:"downReason,omitempty"`
	DownUntil     *time.Time `json:"downUntil,omitempty"`
	Health        float64    `json:"health"`
	Sends         int64      `json:"sends"`
	Succeeded     int64      `json:"succeeded"`
	RatePerSecond *float64   `json:"ratePerSecond,omitempty"`
	Tenants       []string   `json:"tenants,omitempty"`
	// Limits are the account's sends per second, minute, hour and day
	// (WECOM_ACCOUNT_LIMITS; 0 = none); nil when it has none.
	Limits *WeComAccountLimits `json:"limits,omitempty"`
}

// WeComAccountLimits are a WeCom account's sends per second, minute, hour
// and day; 0 = no limit.
type WeComAccountLimits struct {
	PerSecond int `json:"perSecond"`
	PerMinute int `json:"perMinute"`
	PerHour   int `json:"perHour"`
	PerDay    int `json:"perDay"`
}

// QueueStat is one queue's depth and fill level.
type QueueStat struct {
	Name string `json:"name"`
	Role string `json:"role"` // main, dead-letter, delay or relay
	// Channel is the API's spelling of the queue's channel ("email",
	// "sms", "wecom"); empty for a queue shared by every channel.
	Channel string `json:"channel"`
	Level   Level  `json:"level,omitempty"` // a main queue's traffic level
	// OldestAgeSeconds is how long the oldest message has waited, where
	// the broker reports it; nil otherwise.
	OldestAgeSeconds *float64 `json:"oldestAgeSeconds,omitempty"`
	Messages         int      `json:"messages"`
	Consumers        int      `json:"consumers"`
	MaxLength        int      `json:"maxLength"` // 0 = unbounded
	Usage            float64  `json:"usage"`     // messages/maxLength, 0..1
	Status           string   `json:"status"`    // ok, warning (above 80%) or missing
}

// DLQStats lists what the dead-letter queues hold.
type DLQStats struct {
	Queues []DLQQueueStat `json:"queues"`
}

// DLQQueueStat is one dead-letter queue's content by reason.
type DLQQueueStat struct {
	Queue    string         `json:"queue"`
	Channel  string         `json:"channel"` // topology channel, as in QueueStat
	Total    int            `json:"total"`
	ByReason map[string]int `json:"byReason"`
	Oldest   *time.Time     `json:"oldest,omitempty"` // nil when empty
	Newest   *time.Time     `json:"newest,omitempty"` // nil when empty
}

// FraudBlock is a phone-number prefix the fraud guard blocks: SMS codes to
// it are refused (429, "suspected SMS pumping") until Until, unless lifted
// (Client.LiftFraudBlock).
type FraudBlock struct {
	Tenant string `json:"tenant"`
	// Prefix is "+", the country calling code and the first digits of the
	// national number (+44740012).
	Prefix string `json:"prefix"`
	// Country is the numbers' ISO 3166 alpha-2 code.
	Country string `json:"country"`
	// Reason is "unverified" (enough codes sent, too few verified) or
	// "spike" (far above the prefix's own baseline).
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
	Until  time.Time `json:"until"`
	// Sent and Verified are the window's counts when the block began.
	Sent     int `json:"sent"`
	Verified int `json:"verified"`
}

// Suppression is one recipient on a tenant's suppression list: codes and
// notices to it are refused (422, "recipient is suppressed: hard bounce
// 5.1.1 on 2026-11-29"), codes only when Reason is not "unsubscribe".
type Suppression struct {
	Tenant  string `json:"tenant"`
	Channel string `json:"channel"` // "email" or "sms"
	// Recipient is normalised as a send's: a lower-case address, E.164.
	Recipient string `json:"recipient"`
	// Reason is hard_bounce, complaint, opt_out, unreachable, unsubscribe
	// or manual.
	Reason string    `json:"reason"`
	Code   string    `json:"code,omitempty"`   // the bounce's or vendor's code: "5.1.1", "21610"
	TaskID string    `json:"taskId,omitempty"` // the message that put it there
	At     time.Time `json:"at"`
}

// SuppressionInput is what Client.AddSuppression adds.
type SuppressionInput struct {
	Channel   string `json:"channel"`
	Recipient string `json:"recipient"`
	Reason    string `json:"reason,omitempty"` // "" is manual
	Code      string `json:"code,omitempty"`
	Tenant    string `json:"tenant,omitempty"` // "" is the key's own; another needs admin
}

// SuppressionPage is one page of Client.ListSuppressions.
type SuppressionPage struct {
	Entries []Suppression `json:"entries"`
	// Next is the cursor of the page after; "" on the last.
	Next string `json:"next,omitempty"`
}

// SuppressionFilter is what Client.ListSuppressions lists; its zero value
// is the first page of everything the key may read.
type SuppressionFilter struct {
	Channel, Recipient, Tenant, Cursor string
	Limit                              int // 0: the server's default (100)
}
