package wecom

import (
	"strconv"
	"strings"

	"github.com/msgpulse/msgpulse/internal/provider"
)

// TokenProblem reports whether errcode says the access token is invalid
// (40014), expired (42001) or missing (41001): the token is refreshed at
// once and the send retried once.
func TokenProblem(errcode int) bool {
	return errcode == 40014 || errcode == 42001 || errcode == 41001
}

// codes maps the errcodes msgpulse tells apart (WeCom's global error code
// list) to what retrying can do. Anything else falls back as the SMS
// vendors' unknown codes do: transient, so it is retried (bounded by
// MAX_RETRIES), never lost.
var codes = map[int]provider.Class{
	-1:     provider.Transient, // system busy
	6000:   provider.Transient, // data version conflict
	40014:  provider.Transient, // invalid access_token (after the one refresh)
	42001:  provider.Transient, // access_token expired (after the one refresh)
	41001:  provider.Transient, // access_token missing (after the one refresh)
	45009:  provider.Throttled, // API call frequency over the limit
	45033:  provider.Throttled, // too many concurrent calls
	40001:  provider.Permanent, // invalid secret
	40013:  provider.Permanent, // invalid corpid
	40056:  provider.Permanent, // invalid agentid
	40003:  provider.Permanent, // invalid userid
	40031:  provider.Permanent, // invalid userid list
	40032:  provider.Permanent, // userid list too long
	40008:  provider.Permanent, // invalid msgtype
	40058:  provider.Permanent, // invalid parameter
	41011:  provider.Permanent, // agentid missing
	44004:  provider.Permanent, // empty content
	45002:  provider.Permanent, // content too long
	48002:  provider.Permanent, // API forbidden for this application
	60020:  provider.Permanent, // caller's IP not in the trusted list
	81013:  provider.Permanent, // user, party and tag all invalid
	82001:  provider.Permanent, // no recipient at all
	93000:  provider.Permanent, // invalid robot webhook key
	93004:  provider.Permanent, // robot disabled
	301002: provider.Permanent, // no permission on the data
}

// Classify returns the class of an errcode.
func Classify(errcode int) provider.Class {
	if c, ok := codes[errcode]; ok {
		return c
	}
	return provider.Transient
}

func classify(name string, a answer) *provider.Error {
	// WeCom appends ", hint: [...], from ip: ..., more info at ..." to
	// errmsg; keep the words only.
	msg, _, _ := strings.Cut(a.ErrMsg, ", hint:")
	return &provider.Error{Provider: name, Class: Classify(a.ErrCode), Code: strconv.Itoa(a.ErrCode), Message: msg}
}
