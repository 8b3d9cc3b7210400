package provider

import (
	"net"
	"net/http"
	"time"
)

// NewHTTPClient returns the one client an HTTP vendor's sender (SMS
// vendors, WeCom) keeps for its lifetime, so connections (and TLS sessions)
// to the vendor are reused. Every phase has a bound: a vendor that accepts
// the connection and then stalls must not hold a consumer goroutine.
func NewHTTPClient(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:             http.ProxyFromEnvironment,
			DialContext:       (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2: true,
			// As many idle connections as sends can be in flight (CONCURRENCY
			// goes up to thousands against a slow vendor: 2,048 for 5,000
			// msg/s at 200 ms a send): a smaller pool closes and redials a
			// connection for most sends over HTTP/1.1, which measured as a
			// fifth of the consumer's CPU at 512.
			MaxIdleConns:          4096,
			MaxIdleConnsPerHost:   4096,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   timeout,
			ResponseHeaderTimeout: timeout,
			ExpectContinueTimeout: time.Second,
		},
		// A vendor API never redirects a send; following one would re-send
		// credentials (or a token, or a robot key) to wherever it points.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
