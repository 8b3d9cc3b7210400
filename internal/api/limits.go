package api

import (
	"errors"
	"net/http"
	"time"

	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/fraud"
	"github.com/msgpulse/msgpulse/internal/phone"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/topology"
	"github.com/msgpulse/msgpulse/internal/verify"
)

func window(d time.Duration, limit int) []ratelimit.Window {
	if limit <= 0 {
		return nil
	}
	return []ratelimit.Window{{Length: d, Limit: limit}}
}

// commonRules apply to every accepted message: per API key, per tenant
// (across its keys), then what tenants share: the global per-channel cap,
// and the enabled global rate-limit configs (sharedRules). They all go to
// the limiter's one script: one round trip whatever the number of rules.
func (s *Server) commonRules(key apikey.Key, channel string) []ratelimit.Rule {
	return append(s.ownRules(key), s.sharedRules(channel)...)
}

// ownRules are a tenant's own limits: per API key and per tenant (across
// its keys).
func (s *Server) ownRules(key apikey.Key) []ratelimit.Rule {
	L := s.opts.Limits
	return []ratelimit.Rule{
		{Name: "per API key", Key: apiKeyRuleKey(key.Name), Windows: window(time.Minute, L.PerAPIKeyMinute)},
		{Name: "per tenant", Key: tenantRuleKey(key.Tenant), Windows: window(time.Minute, L.PerTenantMinute)},
	}
}

// sharedRules are the limits every tenant's messages count against
// together: the channel's global cap and the global rate-limit configs.
func (s *Server) sharedRules(channel string) []ratelimit.Rule {
	L := s.opts.Limits
	perSecond := L.EmailPerSecond
	switch channel {
	case chSMS:
		perSecond = L.SMSPerSecond
	case chWeCom, chWeComRobot:
		perSecond = L.WeComPerSecond
	}
	rules := []ratelimit.Rule{{Name: "global " + channel, Key: globalRuleKey(channel), Windows: window(time.Second, perSecond)}}
	return append(rules, s.d.RateLimits.Rules("")...)
}

// codeReserve is the last share of every limit tenants share (the global
// cap of a channel, the global rate-limit configs) that only codes may use:
// a notice is held to the rest, so no burst of notices, whatever its
// priority or tenant, gets a code a 429 there. Codes and notices count
// under the same keys, and codes may use the whole. A tenant's own limits
// (per API key, per tenant) stay whole: how a tenant splits its own quota
// between its codes and its notices is its choice (a key per service).
const codeReserve = 0.2

// noticeRules are the rules of a notice: its tenant's own limits, the
// shared ones less the codes' reserve and, for an urgent notice, its
// tenant's urgent limit (LIMIT_HIGH_PER_TENANT_PER_MINUTE): the notices'
// queues are every tenant's, and one tenant's campaign marked urgent
// cannot take the room of the others'.
func (s *Server) noticeRules(key apikey.Key, req *Message) []ratelimit.Rule {
	L := s.opts.Limits
	rules := s.ownRules(key)
	if req.level == topology.High {
		rules = append(rules, ratelimit.Rule{Name: "urgent notices per tenant", Key: urgentRuleKey(key.Tenant),
			Windows: window(time.Minute, L.HighPerTenantMinute)})
	}
	return append(rules, ratelimit.Reserve(nonEmpty(s.sharedRules(req.channel)), codeReserve, "codes")...)
}

func (s *Server) verifyRequest(key apikey.Key, r *VerificationCodeRequest) ratelimit.Request {
	L := s.opts.Limits
	// Every per-recipient limit and the cooldown belong to the caller's
	// tenant, as the code does (verify.Tag): another tenant's requests for
	// the same recipient neither count against them nor reveal them. They
	// share that tag, so on a Redis Cluster one script checks them together
	// and concurrent requests for one recipient cannot refuse each other in
	// two slots.
	// An email address counts as its mailbox (emailIdentity): alice+1@
	// and alice+2@ share alice's limits and cooldown.
	tag := verify.Tag(key.Tenant, r.Channel, r.limitAs)
	rules := []ratelimit.Rule{{Name: "per recipient", Key: recipientRuleKey(tag), Tag: tag,
		Windows: append(window(time.Hour, L.PerRecipientHour), window(24*time.Hour, L.PerRecipientDay)...)}}
	if n := L.PerRecipientDayAllTenants; n > 0 {
		// The one limit tenants share, on purpose: a ceiling on what all of
		// them together send one recipient. Its own tag (the recipient
		// without the tenant): a slot of its own on a Redis Cluster.
		all := r.Channel + ":" + r.limitAs
		rules = append(rules, ratelimit.Rule{Name: "per recipient, all tenants", Key: allTenantsRuleKey(all), Tag: all,
			Windows: window(24*time.Hour, n)})
	}
	if ip, _ := clientKey(r.ClientIP); ip != "" {
		// clientIp is what the tenant says: counted per tenant, so that one
		// tenant naming another's users' addresses cannot lock them out.
		rules = append(rules, ratelimit.Rule{Name: "per IP", Key: ipRuleKey(key.Tenant, ip), Windows: window(time.Minute, L.PerIPMinute)})
	}
	rules = append(rules, s.commonRules(key, r.Channel)...)
	// A code to a recipient on the tenant's suppression list is refused in
	// the same script, unless it only unsubscribed.
	suppress := s.suppressCheck(key.Tenant, r.Channel, r.Recipient, true)
	var guard *ratelimit.Guard
	if r.Channel == chSMS && s.d.Fraud != nil {
		// The fraud guard judges the number's prefix in the same script.
		guard, _ = s.d.Fraud.Watch(key.Tenant, r.number)
	}
	return ratelimit.Request{
		Guard:    guard,
		Suppress: suppress,
		Rules:    nonEmpty(rules),
		// The cooldown also makes two identical requests at the same moment
		// create one code: the second finds the first's cooldown.
		Cooldown: &ratelimit.Cooldown{Name: "resend cooldown", Key: cooldownKey(tag, r.Purpose), Tag: tag, For: L.ResendInterval},
	}
}

func nonEmpty(rules []ratelimit.Rule) []ratelimit.Rule {
	out := rules[:0]
	for _, r := range rules {
		if len(r.Windows) > 0 {
			out = append(out, r)
		}
	}
	return out
}

// checkNumber applies the SMS code policy to n: 400 for a number type
// codes do not go to, 403 for a country the tenant may not send codes to.
func (s *Server) checkNumber(tenant string, n phone.Number) *apiError {
	err := s.opts.SMSCodes.Check(tenant, n)
	var te *fraud.TypeError
	var ce *fraud.CountryError
	switch {
	case errors.As(err, &te):
		s.fraud.Refused.WithLabelValues(fraud.RefusedNumberType).Inc()
		return &apiError{Status: http.StatusBadRequest, Msg: te.Error()}
	case errors.As(err, &ce):
		s.fraud.Refused.WithLabelValues(fraud.RefusedCountry).Inc()
		return &apiError{Status: http.StatusForbidden, Msg: ce.Error()}
	}
	return nil
}

// suppressCheck is the limiter's check of a request to recipient
// (normalised): nil without a list, or on a channel that keeps none.
// A code (code) is refused by every reason but an unsubscribe.
func (s *Server) suppressCheck(tenant, channel, recipient string, code bool) *ratelimit.Suppress {
	if s.d.Suppression == nil {
		return nil
	}
	return s.d.Suppression.Check(tenant, channel, recipient, code)
}
