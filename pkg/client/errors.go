package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// APIError is a non-2xx answer from msgpulse (or from a proxy in front of
// it). It is returned as is, not wrapped, so both errors.As and a type
// assertion find it.
type APIError struct {
	// StatusCode is the HTTP status; it is authoritative even when the
	// envelope's code says otherwise.
	StatusCode int
	// Msg is the envelope's msg. When the body is not an envelope (a proxy's
	// error page, an empty body) it is a trimmed excerpt of the body, or the
	// status text, so that the error is never blank.
	Msg string
	// RetryAfter is the Retry-After header's delay (seconds or HTTP date);
	// 0 when absent or unreadable.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	s := "msgpulse: HTTP " + strconv.Itoa(e.StatusCode) + ": " + e.Msg
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(" (retry after %s)", e.RetryAfter)
	}
	return s
}

// IsRateLimited reports whether err is (or wraps) a 429 answer, and how long
// the server asked to wait (0 if it did not say).
func IsRateLimited(err error) (retryAfter time.Duration, ok bool) {
	var ae *APIError
	if errors.As(err, &ae) && ae.StatusCode == http.StatusTooManyRequests {
		return ae.RetryAfter, true
	}
	return 0, false
}

// IsNotFound reports whether err is (or wraps) a 404 answer.
func IsNotFound(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.StatusCode == http.StatusNotFound
}

// maxErrorExcerpt bounds how much of a non-envelope body goes into Msg: an
// error message is for humans and logs, not for a whole HTML page.
const maxErrorExcerpt = 200

// newAPIError builds the error for a non-2xx answer. body may be truncated.
func newAPIError(resp *http.Response, body []byte, now time.Time) *APIError {
	e := &APIError{
		StatusCode: resp.StatusCode,
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), now),
	}
	var env envelope
	// An object that has neither code nor msg is not our envelope (an API
	// gateway's {"message": "..."} for instance): fall back to the excerpt,
	// which keeps whatever the gateway said.
	if json.Unmarshal(body, &env) == nil && (env.Msg != "" || env.Code != 0) {
		e.Msg = env.Msg
	}
	if e.Msg == "" {
		e.Msg = excerpt(body, resp.Header.Get("Content-Type"))
	}
	if e.Msg == "" {
		e.Msg = http.StatusText(resp.StatusCode)
	}
	if e.Msg == "" {
		e.Msg = "no message"
	}
	return e
}

// excerpt turns a body into one short readable line: tags stripped from
// HTML, whitespace collapsed, cut on a rune boundary.
func excerpt(body []byte, contentType string) string {
	s := string(body)
	if strings.Contains(contentType, "html") || strings.HasPrefix(strings.TrimSpace(s), "<") {
		s = stripTags(s)
	}
	s = strings.Join(strings.Fields(s), " ")
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) > maxErrorExcerpt {
		cut := maxErrorExcerpt
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// stripTags removes <...> runs. It is not an HTML parser and needs not be:
// the result only has to be readable in a log line.
func stripTags(s string) string {
	var b strings.Builder
	in := false
	for _, r := range s {
		switch {
		case r == '<':
			in = true
			b.WriteByte(' ')
		case r == '>' && in:
			in = false
		case !in:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// parseRetryAfter reads a Retry-After value: delay-seconds (what msgpulse
// sends) or an HTTP date (what a proxy may send). Unreadable or past values
// are 0, so a caller never waits on garbage.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		switch {
		case n <= 0:
			return 0
		case n > math.MaxInt64/int64(time.Second):
			return time.Duration(math.MaxInt64)
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}
