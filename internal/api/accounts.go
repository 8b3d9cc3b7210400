package api

import (
	"context"
	"net/url"
	"strings"
	"unicode"

	"github.com/msgpulse/msgpulse/internal/accountstate"
	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/provider/wecom"
	"github.com/msgpulse/msgpulse/pkg/client"
)

// checkAccount resolves the WeCom account of an application message for
// the caller's tenant: the one named, else the first listed for the
// tenant, else default. Another tenant's account, or an unknown one, is a
// 400 naming it.
func (s *Server) checkAccount(caller apikey.Key, req *Message) *apiError {
	if req.channel != chWeCom {
		return nil
	}
	name, err := wecom.AccountFor(s.opts.WeComAccounts, caller.Tenant, req.Account)
	if err != nil {
		return badRequest("%v", err)
	}
	req.account = name
	return nil
}

// WeComAccountStates is what /api/queues/stats shows in wecomAccounts,
// for the console: the same reader, so the two never disagree. It is nil
// when no WeCom account is configured: WECOM_ACCOUNTS and
// WECOM_ACCOUNT_LIMITS are empty and the default account (WECOM_CORP_ID…,
// which only the consumer reads) shows no sign of use (no sends in the
// health window, no rate noted, not down). It only reads.
func (s *Server) WeComAccountStates(ctx context.Context) ([]accountstate.State, error) {
	if s.d.Accounts == nil {
		return nil, nil
	}
	out, err := s.wecomAccounts(ctx)
	if err != nil || len(s.opts.WeComAccounts) > 0 || len(s.opts.WeComLimits) > 0 {
		return out, err
	}
	if d := out[0]; d.Sends == 0 && d.RatePerSecond == nil && d.Status == "up" {
		return nil, nil
	}
	return out, nil
}

// wecomAccounts is the state of every WeCom account: default, then
// WECOM_ACCOUNTS.
func (s *Server) wecomAccounts(ctx context.Context) ([]accountstate.State, error) {
	names := []wecom.Account{{Name: wecom.DefaultAccount}}
	for _, a := range s.opts.WeComAccounts {
		if a.Name == wecom.DefaultAccount {
			names[0] = a
			continue
		}
		names = append(names, a)
	}
	out := make([]accountstate.State, 0, len(names))
	for _, a := range names {
		st, err := s.d.Accounts.Get(ctx, a.Name)
		if err != nil {
			return nil, err
		}
		st.Tenants = a.Tenants
		if l, ok := s.opts.WeComLimits[a.Name]; ok {
			limits := client.WeComAccountLimits(l)
			st.Limits = &limits
		}
		out = append(out, st)
	}
	return out, nil
}

// Media is a WECOM message's file: "media": {"type", "url", "filename"}.
type Media struct {
	Type     string `json:"type"`
	URL      string `json:"url"`
	Filename string `json:"filename,omitempty"`
}

func (m *Media) validate(channel, templateCode string, allowHTTP bool) *apiError {
	switch {
	case channel != chWeCom:
		return badRequest("media is for WECOM messages only")
	case templateCode != "":
		return badRequest("give media or templateCode, not both")
	case m.Type != "image" && m.Type != "file" && m.Type != "video":
		return badRequest("media type must be \"image\", \"file\" or \"video\"")
	case len(m.Filename) > 128 || strings.ContainsAny(m.Filename, "/\\\"") || strings.IndexFunc(m.Filename, unicode.IsControl) >= 0:
		return badRequest("media filename: at most 128 characters, without / \\ \" or control characters")
	}
	u, err := url.Parse(m.URL)
	if err != nil || u.Host == "" || len(m.URL) > 2048 || (u.Scheme != "https" && (!allowHTTP || u.Scheme != "http")) {
		return badRequest("media url must be an absolute https URL (http with CALLBACK_ALLOW_HTTP)")
	}
	return nil
}
