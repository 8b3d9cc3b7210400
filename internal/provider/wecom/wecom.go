package wecom

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/msgpulse/msgpulse/internal/provider"
)

// Provider names, as metrics and status records show them.
const (
	Name      = "wecom"
	RobotName = "wecom-robot"
)

// Defaults.
const (
	DefaultAPIBase                = "https://qyapi.weixin.qq.com"
	DefaultDuplicateCheckInterval = 1800 * time.Second
	DefaultTimeout                = 10 * time.Second
	// MaxUsers is the most userids one message/send call takes.
	MaxUsers = 1000
	// RobotPerMinute is WeCom's documented limit of a group robot.
	RobotPerMinute = 20
	// MentionAll mentions everyone in a robot's group (text messages only).
	MentionAll = "@all"
)

// Config configures the client.
type Config struct {
	CorpID     string
	CorpSecret string
	AgentID    int64
	APIBase    string            // default DefaultAPIBase; any http(s) base, so a test server can stand in
	Robots     map[string]string // robot name → webhook key
	// RobotTenants are the tenants each robot belongs to (WECOM_ROBOTS'
	// @tenant+tenant); a robot absent here or with none listed belongs to
	// every tenant. A post from another tenant is refused, permanently.
	RobotTenants map[string][]string
	// Accounts are more applications (WECOM_ACCOUNTS), besides the
	// single-account settings above, which are the account "default".
	Accounts []Account
	// DuplicateCheckInterval is WeCom's duplicate_check_interval: the same
	// request within it is delivered once (it absorbs a crash-window resend).
	DuplicateCheckInterval time.Duration
	Timeout                time.Duration
}

// Validate fills defaults and reports the first invalid setting. The
// application settings are only required together: a deployment with
// robots alone is valid.
func (c *Config) Validate() error {
	c.APIBase = cmp.Or(c.APIBase, DefaultAPIBase)
	c.DuplicateCheckInterval = cmp.Or(c.DuplicateCheckInterval, DefaultDuplicateCheckInterval)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	u, err := url.Parse(c.APIBase)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("wecom: API base %q must be an http(s) URL", c.APIBase)
	}
	c.APIBase = strings.TrimRight(c.APIBase, "/")
	app := c.CorpID != "" || c.CorpSecret != "" || c.AgentID != 0
	if app && (c.CorpID == "" || c.CorpSecret == "" || c.AgentID <= 0) {
		return errors.New("wecom: an application needs WECOM_CORP_ID, WECOM_CORP_SECRET and WECOM_AGENT_ID")
	}
	if _, err := c.allAccounts(); err != nil {
		return err
	}
	if !app && len(c.Accounts) == 0 && len(c.Robots) == 0 {
		return errors.New("wecom: configure an application (WECOM_CORP_ID, WECOM_CORP_SECRET, WECOM_AGENT_ID) or robots (WECOM_ROBOTS)")
	}
	if d := c.DuplicateCheckInterval; d < time.Second || d > 4*time.Hour {
		return fmt.Errorf("wecom: duplicate check interval %s: WeCom takes 1s to 4h", d)
	}
	return nil
}

// Robot is one WECOM_ROBOTS entry: name=KEY[@tenant+tenant].
type Robot struct {
	Name string
	// Key is the robot's webhook key; "" where it is not needed (the API
	// only checks who may post).
	Key string
	// Tenants may post to the robot; none listed means every tenant.
	Tenants []string
}

// Allows reports whether tenant may post to the robot.
func (r Robot) Allows(tenant string) bool {
	return len(r.Tenants) == 0 || slices.Contains(r.Tenants, tenant)
}

// ParseRobotList reads WECOM_ROBOTS: name=KEY or name=KEY@tenant+tenant,
// comma-separated. A robot with tenants listed belongs to them alone;
// without, to every tenant. When keyRequired is false (the API, which
// never posts) the key may be left out: name=@tenant+tenant, or name for
// every tenant; a full entry is accepted too, so one value serves both.
func ParseRobotList(s string, keyRequired bool) ([]Robot, error) {
	var out []Robot
	seen := map[string]bool{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, value, hasValue := strings.Cut(item, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		// A webhook key has no "@": what follows the first one is tenants.
		key, tenants, hasTenants := strings.Cut(value, "@")
		key = strings.TrimSpace(key)
		if name == "" || (keyRequired && (!hasValue || key == "")) || (hasValue && !hasTenants && key == "") {
			// Never echo the item: it holds a key.
			return nil, fmt.Errorf("robot %q: want name=KEY or name=KEY@tenant+tenant", name)
		}
		if seen[name] {
			return nil, fmt.Errorf("robot %q mapped twice", name)
		}
		seen[name] = true
		r := Robot{Name: name, Key: key}
		if hasTenants {
			for t := range strings.SplitSeq(tenants, "+") {
				t = strings.TrimSpace(t)
				if t == "" || strings.ContainsAny(t, ":/") {
					return nil, fmt.Errorf("robot %q: tenant %q: want tenant names (an API key name's part before /) joined by +", name, t)
				}
				r.Tenants = append(r.Tenants, t)
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// ParseRobots reads WECOM_ROBOTS for the consumer: every robot's webhook
// key, and the tenants of those that list some.
func ParseRobots(s string) (keys map[string]string, tenants map[string][]string, err error) {
	list, err := ParseRobotList(s, true)
	if err != nil {
		return nil, nil, err
	}
	keys = make(map[string]string, len(list))
	for _, r := range list {
		keys[r.Name] = r.Key
		if len(r.Tenants) > 0 {
			if tenants == nil {
				tenants = map[string][]string{}
			}
			tenants[r.Name] = r.Tenants
		}
	}
	return keys, tenants, nil
}

// Tokens hands out the application's access token. Invalidate drops bad
// if it is still the current one, so that a refresh happens once however
// many senders saw it fail.
type Tokens interface {
	Token(ctx context.Context) (string, error)
	Invalidate(ctx context.Context, bad string) error
}

// Client sends through WeCom. It is safe for concurrent use.
type Client struct {
	cfg  Config
	http *http.Client
	// upload shares http's connections without its Timeout: an upload
	// (up to 20 MB) is bounded by its caller's context alone
	// (WECOM_MEDIA_UPLOAD_TIMEOUT), not by a send's.
	upload *http.Client
	apps   []*App // as configured: default first, then WECOM_ACCOUNTS
	// robots are WECOM_ROBOTS, each with its key and tenants, by name.
	robots map[string]*Robot
}

// New validates cfg and returns a Client whose default account (the
// single-account settings) uses tokens. tokens may be nil when only robots
// are configured; with WECOM_ACCOUNTS, use NewAccounts.
func New(cfg Config, tokens Tokens) (*Client, error) {
	return NewAccounts(cfg, func(a Account, _ func(context.Context) (string, time.Duration, error)) (Tokens, error) {
		if tokens == nil || a.Name != DefaultAccount {
			return nil, errors.New("wecom: an application needs a token source")
		}
		return tokens, nil
	})
}

// NewAccounts validates cfg and returns a Client with a token source per
// account, from tokensFor.
func NewAccounts(cfg Config, tokensFor TokensFor) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// The vendors' shared client: a pool as large as the sends in flight,
	// every phase bounded, redirects refused (they would carry the token or
	// the robot key elsewhere).
	c := &Client{cfg: cfg, http: provider.NewHTTPClient(cfg.Timeout)}
	up := *c.http
	up.Timeout = 0
	c.upload = &up
	accounts, err := cfg.allAccounts()
	if err != nil {
		return nil, err
	}
	for _, a := range accounts {
		fetch := func(ctx context.Context) (string, time.Duration, error) { return c.fetchToken(ctx, a.CorpID, a.Secret) }
		tokens, err := tokensFor(a, fetch)
		if err != nil {
			return nil, err
		}
		c.apps = append(c.apps, &App{Account: a, tokens: tokens})
	}
	c.robots = make(map[string]*Robot, len(cfg.Robots))
	for name, key := range cfg.Robots {
		c.robots[name] = &Robot{Name: name, Key: key, Tenants: cfg.RobotTenants[name]}
	}
	return c, nil
}

// Name implements provider.WeComSender.
func (c *Client) Name() string { return Name }

// Close drops idle connections.
func (c *Client) Close() error {
	c.http.CloseIdleConnections()
	return nil
}

// answer is the part of every WeCom reply msgpulse reads.
type answer struct {
	ErrCode        int    `json:"errcode"`
	ErrMsg         string `json:"errmsg"`
	AccessToken    string `json:"access_token"`
	ExpiresIn      int64  `json:"expires_in"`
	InvalidUser    string `json:"invaliduser"`
	UnlicensedUser string `json:"unlicenseduser"`
	MsgID          string `json:"msgid"`
	MediaID        string `json:"media_id"` // media/upload
}

// FetchToken asks WeCom for a new access token and how long it lives. The
// token package calls it, once per expiry for the whole fleet.
func (c *Client) FetchToken(ctx context.Context) (string, time.Duration, error) {
	return c.fetchToken(ctx, c.cfg.CorpID, c.cfg.CorpSecret)
}

func (c *Client) fetchToken(ctx context.Context, corpID, secret string) (string, time.Duration, error) {
	q := url.Values{"corpid": {corpID}, "corpsecret": {secret}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.cfg.APIBase+"/cgi-bin/gettoken?"+q.Encode(), nil)
	if err != nil {
		return "", 0, err
	}
	a, err := c.call(req, Name)
	if err != nil {
		return "", 0, err
	}
	if a.ErrCode != 0 {
		return "", 0, classify(Name, a)
	}
	if a.AccessToken == "" || a.ExpiresIn <= 0 {
		return "", 0, &provider.Error{Provider: Name, Class: provider.Transient, Code: "bad_token_reply", Message: "gettoken answered without access_token or expires_in"}
	}
	return a.AccessToken, time.Duration(a.ExpiresIn) * time.Second, nil
}

// SendWeCom implements provider.WeComSender: a robot's post, or an
// application message from the account m names (see SendApp, which a
// caller that has the account already uses).
func (c *Client) SendWeCom(ctx context.Context, m provider.WeCom) (provider.WeComReceipt, error) {
	if m.Robot != "" {
		r, ok := c.robots[m.Robot]
		if !ok {
			return provider.WeComReceipt{}, UnknownRobot(m.Robot)
		}
		// The API refuses another tenant's robot (404); this holds even
		// for a message that got past it (an older API, a hand-made
		// publish).
		if !r.Allows(m.Tenant) {
			return provider.WeComReceipt{}, RobotNotAllowed(r.Name, m.Tenant)
		}
		return c.SendRobot(ctx, r, m)
	}
	a, err := c.App(AccountName(m))
	if err != nil {
		return provider.WeComReceipt{}, err
	}
	return c.SendApp(ctx, a, m)
}

func badFormat(format string) *provider.Error {
	return &provider.Error{Provider: Name, Class: provider.Permanent, Code: "format", Message: "format " + strconv.Quote(format) + " is not text or markdown"}
}

// App returns the application account named name.
func (c *Client) App(name string) (*App, error) {
	for _, a := range c.apps {
		if a.Name == name {
			return a, nil
		}
	}
	return nil, &provider.Error{Provider: Name, Class: provider.Permanent, Code: "not_configured", Message: "no WeCom application " + strconv.Quote(name) + " is configured (WECOM_ACCOUNTS, or WECOM_CORP_ID, WECOM_CORP_SECRET, WECOM_AGENT_ID for default)"}
}

// SendApp sends an application message (m.Robot empty) from acct, which
// the caller resolved once (Apps, App): the client looks nothing up.
func (c *Client) SendApp(ctx context.Context, acct *App, m provider.WeCom) (provider.WeComReceipt, error) {
	if !media(m.Format) && !card(m.Format) && m.Format != "text" && m.Format != "markdown" {
		return provider.WeComReceipt{}, badFormat(m.Format)
	}
	if n := len(m.ToUsers); n == 0 || n > MaxUsers {
		return provider.WeComReceipt{}, &provider.Error{Provider: Name, Class: provider.Permanent, Code: "touser", Message: fmt.Sprintf("%d users: one call takes 1 to %d", n, MaxUsers)}
	}
	if err := CheckUsers(m.ToUsers); err != nil {
		return provider.WeComReceipt{}, err
	}
	body, err := json.Marshal(map[string]any{
		"touser":                   strings.Join(m.ToUsers, "|"),
		"msgtype":                  m.Format,
		"agentid":                  acct.AgentID,
		m.Format:                   appContent(m),
		"enable_duplicate_check":   1,
		"duplicate_check_interval": int(c.cfg.DuplicateCheckInterval / time.Second),
	})
	if err != nil {
		return provider.WeComReceipt{}, err
	}
	// One resend at most: with a token refreshed because WeCom said the
	// one we used is invalid, expired or missing.
	for refreshed := false; ; refreshed = true {
		tok, err := acct.tokens.Token(ctx)
		if err != nil {
			return provider.WeComReceipt{}, err
		}
		a, err := c.postJSON(ctx, "/cgi-bin/message/send?access_token="+url.QueryEscape(tok), body, Name)
		if err != nil {
			return provider.WeComReceipt{}, err
		}
		if TokenProblem(a.ErrCode) && !refreshed {
			if err := acct.tokens.Invalidate(ctx, tok); err != nil {
				return provider.WeComReceipt{}, err
			}
			continue
		}
		return appReceipt(m, a)
	}
}

// appReceipt turns a message/send answer into a receipt: the users WeCom
// listed as invalid or unlicensed failed, the others got the message. When
// every user failed (81013, or all listed) it is a permanent error.
func appReceipt(m provider.WeCom, a answer) (provider.WeComReceipt, error) {
	rejected := map[string]string{}
	for _, l := range []struct{ list, why string }{
		{a.InvalidUser, "invaliduser: WeCom does not know this userid, or it is outside the application's visible range"},
		{a.UnlicensedUser, "unlicenseduser: the user has no license for this application"},
	} {
		for _, u := range strings.Split(l.list, "|") {
			if u != "" && slices.Contains(m.ToUsers, u) {
				rejected[u] = l.why
			}
		}
	}
	if a.ErrCode != 0 && a.ErrCode != 81013 {
		return provider.WeComReceipt{}, classify(Name, a)
	}
	if a.ErrCode == 81013 || len(rejected) == len(m.ToUsers) {
		why := "every recipient was refused"
		for _, r := range rejected {
			why = r
			break
		}
		return provider.WeComReceipt{}, &provider.Error{Provider: Name, Class: provider.Permanent, Code: strconv.Itoa(a.ErrCode), Message: why}
	}
	return provider.WeComReceipt{Receipt: provider.Receipt{Provider: Name, MessageID: a.MsgID}, Rejected: rejected}, nil
}

// UnknownRobot is the permanent error of a message to a robot that is not
// in WECOM_ROBOTS.
func UnknownRobot(robot string) error {
	return &provider.Error{Provider: RobotName, Class: provider.Permanent, Code: "unknown_robot", Message: "no robot " + strconv.Quote(robot) + " in WECOM_ROBOTS"}
}

// RobotNotAllowed is the permanent error of a message to a robot that
// does not belong to its tenant.
func RobotNotAllowed(robot, tenant string) error {
	return &provider.Error{Provider: RobotName, Class: provider.Permanent, Code: "robot_not_allowed",
		Message: "robot " + strconv.Quote(robot) + " does not belong to tenant " + strconv.Quote(tenant) + " (WECOM_ROBOTS)"}
}

// SendRobot posts m to r, a robot of Robots() that its caller resolved
// once and checked m's tenant against (Robot.Allows): nothing is looked
// up by name here.
func (c *Client) SendRobot(ctx context.Context, r *Robot, m provider.WeCom) (provider.WeComReceipt, error) {
	if m.Format != "text" && m.Format != "markdown" {
		return provider.WeComReceipt{}, badFormat(m.Format)
	}
	content := map[string]any{"content": m.Content}
	if len(m.Mentions) > 0 {
		if m.Format == "text" {
			content["mentioned_list"] = m.Mentions
		} else {
			// Markdown has no mentioned_list: a mention is <@userid> in the
			// text, and there is none for everyone.
			var b strings.Builder
			b.WriteString(m.Content + "\n")
			for _, u := range m.Mentions {
				if u == MentionAll {
					return provider.WeComReceipt{}, &provider.Error{Provider: RobotName, Class: provider.Permanent, Code: "mention_all_markdown", Message: "a markdown robot message cannot mention @all; use a text template"}
				}
				b.WriteString("<@" + u + ">")
			}
			content["content"] = b.String()
		}
	}
	body, err := json.Marshal(map[string]any{"msgtype": m.Format, m.Format: content})
	if err != nil {
		return provider.WeComReceipt{}, err
	}
	a, err := c.postJSON(ctx, "/cgi-bin/webhook/send?key="+url.QueryEscape(r.Key), body, RobotName)
	if err != nil {
		return provider.WeComReceipt{}, err
	}
	if a.ErrCode != 0 {
		return provider.WeComReceipt{}, classify(RobotName, a)
	}
	return provider.WeComReceipt{Receipt: provider.Receipt{Provider: RobotName}}, nil
}

// postJSON posts body to pathAndQuery under the API base and decodes
// WeCom's answer, as call does.
func (c *Client) postJSON(ctx context.Context, pathAndQuery string, body []byte, name string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.APIBase+pathAndQuery, bytes.NewReader(body))
	if err != nil {
		// Never err itself: it quotes the URL, which holds the token or
		// the robot key.
		return answer{}, &provider.Error{Provider: name, Class: provider.Permanent, Code: "bad_url",
			Message: "the request URL does not parse (WECOM_API_BASE)"}
	}
	req.Header.Set("Content-Type", "application/json")
	return c.call(req, name)
}

// call does req and decodes WeCom's JSON answer. Transport failures and
// HTTP errors come back classified, without the URL (it holds the token or
// the robot key).
func (c *Client) call(req *http.Request, name string) (answer, error) {
	return c.callWith(c.http, req, name)
}

func (c *Client) callWith(client *http.Client, req *http.Request, name string) (answer, error) {
	resp, err := client.Do(req) //nolint:gosec // the base URL comes from configuration
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return answer{}, &provider.Error{Provider: name, Class: provider.Transient, Code: "connection", Err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return answer{}, &provider.Error{Provider: name, Class: provider.Transient, Code: "connection", Err: err}
	}
	if resp.StatusCode != http.StatusOK {
		class := provider.Permanent
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusRequestTimeout {
			class = provider.Transient
		}
		return answer{}, &provider.Error{Provider: name, Class: class, Code: "http_" + strconv.Itoa(resp.StatusCode)}
	}
	var a answer
	if err := json.Unmarshal(raw, &a); err != nil {
		return answer{}, &provider.Error{Provider: name, Class: provider.Transient, Code: "bad_reply", Message: "WeCom's answer is not JSON"}
	}
	return a, nil
}
