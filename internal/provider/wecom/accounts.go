package wecom

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/provider"
)

// DefaultAccount is the account of the single-account settings
// (WECOM_CORP_ID, WECOM_CORP_SECRET, WECOM_AGENT_ID), and the one a message
// naming no account, from a tenant with none listed, is sent from.
const DefaultAccount = "default"

// Account is one WeCom application messages are sent from: a
// WECOM_ACCOUNTS entry, name=corpid:agentid:secret[@tenant+tenant].
type Account struct {
	Name    string
	CorpID  string
	AgentID int64
	// Secret is "" where it is not needed (the API never sends).
	Secret string
	// Tenants may send from the account; none listed means every tenant.
	Tenants []string
}

// Allows reports whether tenant may send from the account.
func (a Account) Allows(tenant string) bool {
	return len(a.Tenants) == 0 || slices.Contains(a.Tenants, tenant)
}

// Key names the account's application for per-account state shared by
// the fleet (access token, adaptive rate): WeCom issues a token per corp
// and application secret, and counts an application's sends.
func (a Account) Key() string {
	return a.CorpID + ":" + strconv.FormatInt(a.AgentID, 10)
}

// ParseAccounts reads WECOM_ACCOUNTS: name=corpid:agentid:secret or
// name=corpid:agentid:secret@tenant+tenant, comma-separated. When
// secretRequired is false (the API, which only checks who may send from
// which account) the secret may be left out: name=corpid:agentid[@…].
// Errors never echo an entry: it holds a secret.
func ParseAccounts(s string, secretRequired bool) ([]Account, error) {
	var out []Account
	seen := map[string]bool{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, value, _ := strings.Cut(item, "=")
		name = strings.TrimSpace(name)
		// A WeCom secret has no "@": what follows the last one is tenants.
		creds, tenants, hasTenants := value, "", false
		if i := strings.LastIndex(value, "@"); i >= 0 {
			creds, tenants, hasTenants = value[:i], value[i+1:], true
		}
		parts := strings.SplitN(strings.TrimSpace(creds), ":", 3)
		bad := func(why string) error {
			return fmt.Errorf("account %q: %s (want name=corpid:agentid:secret or name=corpid:agentid:secret@tenant+tenant)", name, why)
		}
		if name == "" || !validName(name) {
			return nil, bad("the name must be letters, digits, _ and -")
		}
		if len(parts) < 2 || strings.TrimSpace(parts[0]) == "" {
			return nil, bad("corpid and agentid missing")
		}
		agent, err := strconv.ParseInt(strings.TrimSpace(parts[1]), 10, 64)
		if err != nil || agent <= 0 {
			return nil, bad("agentid must be a positive integer")
		}
		a := Account{Name: name, CorpID: strings.TrimSpace(parts[0]), AgentID: agent}
		if len(parts) == 3 {
			a.Secret = strings.TrimSpace(parts[2])
		}
		if secretRequired && a.Secret == "" {
			return nil, bad("secret missing")
		}
		if seen[name] {
			return nil, fmt.Errorf("account %q listed twice", name)
		}
		seen[name] = true
		if hasTenants {
			for t := range strings.SplitSeq(tenants, "+") {
				if t = strings.TrimSpace(t); t != "" {
					a.Tenants = append(a.Tenants, t)
				}
			}
			if len(a.Tenants) == 0 {
				return nil, bad("@ without tenants")
			}
		}
		out = append(out, a)
	}
	return out, nil
}

func validName(s string) bool {
	for _, r := range s {
		if r != '_' && r != '-' && (r < '0' || r > '9') && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') {
			return false
		}
	}
	return len(s) <= 64
}

// AccountFor picks the account a tenant's message is sent from: the one it
// named, else the first account listing the tenant, else DefaultAccount.
// A named account the tenant may not use, or that does not exist, is an
// error naming it. accounts are WECOM_ACCOUNTS; the default account,
// unless WECOM_ACCOUNTS defines one, belongs to every tenant.
func AccountFor(accounts []Account, tenant, named string) (string, error) {
	if named != "" {
		for _, a := range accounts {
			if a.Name == named {
				if !a.Allows(tenant) {
					return "", fmt.Errorf("WeCom account %q is not listed for tenant %q", named, tenant)
				}
				return named, nil
			}
		}
		if named == DefaultAccount {
			return named, nil
		}
		return "", fmt.Errorf("unknown WeCom account %q", named)
	}
	for _, a := range accounts {
		if slices.Contains(a.Tenants, tenant) {
			return a.Name, nil
		}
	}
	for _, a := range accounts {
		if a.Name == DefaultAccount && !a.Allows(tenant) {
			return "", fmt.Errorf("WeCom account %q is not listed for tenant %q, and no account is", DefaultAccount, tenant)
		}
	}
	return DefaultAccount, nil
}

// allAccounts are the configured applications: the single-account
// settings as DefaultAccount, then WECOM_ACCOUNTS.
func (c *Config) allAccounts() ([]Account, error) {
	var out []Account
	if c.CorpID != "" {
		out = append(out, Account{Name: DefaultAccount, CorpID: c.CorpID, AgentID: c.AgentID, Secret: c.CorpSecret})
	}
	for _, a := range c.Accounts {
		if a.Name == DefaultAccount && c.CorpID != "" {
			return nil, errors.New("wecom: WECOM_ACCOUNTS defines the account default, and so do WECOM_CORP_ID, WECOM_CORP_SECRET and WECOM_AGENT_ID: keep one")
		}
		if a.Secret == "" || a.CorpID == "" || a.AgentID <= 0 {
			return nil, fmt.Errorf("wecom: account %q needs corpid, agentid and secret", a.Name)
		}
		out = append(out, a)
	}
	return out, nil
}

// TokensFor builds an account's token source; fetch asks WeCom for a new
// token of that account.
type TokensFor func(a Account, fetch func(ctx context.Context) (string, time.Duration, error)) (Tokens, error)

// App is one application account as the client sends from it: its
// configuration (name, corp, agent, secret, tenants) and its token source.
// A caller resolves it once (Client.Apps, Client.App) and hands it to
// SendApp and UploadMedia, which look nothing up by name.
type App struct {
	Account
	tokens Tokens
}

// Apps returns the configured applications, the default first, then
// WECOM_ACCOUNTS in order (secrets included: the consumer's own
// configuration).
func (c *Client) Apps() []*App { return append([]*App(nil), c.apps...) }

// Robots returns the configured group robots, sorted by name, each with
// its tenants and key (the consumer's own configuration, as Apps): a
// caller resolves a message's robot once and posts with SendRobot.
func (c *Client) Robots() []*Robot {
	out := make([]*Robot, 0, len(c.robots))
	for _, r := range c.robots {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *Robot) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// AccountName is the account an application message is sent from: the one
// it names, or DefaultAccount.
func AccountName(m provider.WeCom) string {
	if m.Account == "" {
		return DefaultAccount
	}
	return m.Account
}

// FetchTokenOf asks WeCom for a new access token of account a.
func (c *Client) FetchTokenOf(ctx context.Context, a Account) (string, time.Duration, error) {
	return c.fetchToken(ctx, a.CorpID, a.Secret)
}

// CredentialsRefused reports whether errcode says WeCom refuses the
// account itself (its secret, corpid, agentid, or the caller's IP): no
// message of the account can go out until an operator fixes it.
func CredentialsRefused(errcode int) bool {
	switch errcode {
	case 40001, 40013, 40056, 60020, 41002, 41004, 40091, 42009, 41011:
		return true
	}
	return false
}

// IsCredentialsRefused reports whether err is WeCom refusing an
// application's credentials (see CredentialsRefused).
func IsCredentialsRefused(err error) bool {
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Provider != Name {
		return false
	}
	n, cerr := strconv.Atoi(pe.Code)
	return cerr == nil && CredentialsRefused(n)
}

// Limits are an account's sends per second, minute, hour and day
// (WECOM_ACCOUNT_LIMITS, seed 004's MultiDimensionalRateLimiter); 0 = none.
type Limits struct {
	PerSecond int `json:"perSecond"`
	PerMinute int `json:"perMinute"`
	PerHour   int `json:"perHour"`
	PerDay    int `json:"perDay"`
}

// A LimitWindow is one window of Limits that is set: N sends per Per.
type LimitWindow struct {
	N   int
	Per time.Duration
}

// Windows are l's windows that are set (not 0), shortest first: the one
// walk of Limits, for the consumer's limiter rule and the console's view.
func (l Limits) Windows() []LimitWindow {
	var out []LimitWindow
	for _, w := range []LimitWindow{{l.PerSecond, time.Second}, {l.PerMinute, time.Minute}, {l.PerHour, time.Hour}, {l.PerDay, 24 * time.Hour}} {
		if w.N > 0 {
			out = append(out, w)
		}
	}
	return out
}

// ParseLimits reads WECOM_ACCOUNT_LIMITS: name=s/m/h/d, comma-separated
// (envconf.Pairs: no secret here, so an entry may be quoted in errors).
func ParseLimits(s string) (map[string]Limits, error) {
	const want = "name=second/minute/hour/day, e.g. default=20/600/10000/100000 (0 = none)"
	pairs, err := envconf.Pairs(s, ",", "account limits for", want)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Limits, len(pairs))
	for _, p := range pairs {
		parts := strings.Split(p.Value, "/")
		if len(parts) != 4 {
			return nil, fmt.Errorf("account limits %q: want %s", p.Item, want)
		}
		var n [4]int
		for i, part := range parts {
			v, err := strconv.Atoi(strings.TrimSpace(part))
			if err != nil || v < 0 {
				return nil, fmt.Errorf("account limits %q: %q is not a whole number ≥ 0", p.Item, part)
			}
			n[i] = v
		}
		out[p.Key] = Limits{PerSecond: n[0], PerMinute: n[1], PerHour: n[2], PerDay: n[3]}
	}
	return out, nil
}
