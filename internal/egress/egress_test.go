package egress

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPublic(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ip     string
		public bool
	}{
		{"127.0.0.1", false}, {"127.255.0.9", false}, {"::1", false},
		{"169.254.169.254", false}, {"fe80::1", false},
		{"10.1.2.3", false}, {"172.16.0.1", false}, {"192.168.1.1", false},
		{"fc00::1", false}, {"fd12:3456::1", false},
		{"0.0.0.0", false}, {"::", false}, {"0.1.2.3", false},
		{"100.64.0.1", false}, {"224.0.0.1", false}, {"ff02::1", false}, {"255.255.255.255", false},
		{"::ffff:127.0.0.1", false}, {"::7f00:1", false}, {"::ffff:10.0.0.1", false}, {"64:ff9b::a00:1", false},
		// Internal-looking ranges the guard once called public (issue 43).
		{"fec0::1", false}, {"feff::1", false}, {"::ffff:0:a00:1", false}, {"::ffff:0:7f00:1", false},
		{"64:ff9b::7f00:1", false}, {"64:ff9b::808:808", false}, {"64:ff9b:1::a00:1", false}, {"64:ff9b:1:ffff::1", false},
		{"192.88.99.1", false}, {"2001:10::1", false}, {"2001:20::1", false},
		{"93.184.216.34", true}, {"8.8.8.8", true}, {"2606:4700:4700::1111", true}, {"::ffff:8.8.8.8", true},
		{"2001:4860:4860::8888", true}, {"2a00:1450::1", true},
	} {
		require.Equal(t, tc.public, Public(netip.MustParseAddr(tc.ip)), tc.ip)
	}
}

func table(m map[string]string) Lookup {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		ip, ok := m[host]
		if !ok {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return []netip.Addr{netip.MustParseAddr(ip)}, nil
	}
}

func TestCheckHost(t *testing.T) {
	t.Parallel()
	p := Policy{Lookup: table(map[string]string{"loop.test": "127.0.0.1", "ok.test": "93.184.216.34"})}
	ctx := context.Background()
	for _, tc := range []struct {
		host    string
		blocked bool
	}{
		{"127.0.0.1", true}, {"169.254.169.254", true}, {"::1", true}, {"10.1.2.3", true}, {"loop.test", true},
		{"93.184.216.34", false}, {"ok.test", false}, {"unknown.test", false},
	} {
		err := p.CheckHost(ctx, tc.host)
		require.Equal(t, tc.blocked, errors.Is(err, ErrBlocked), "%s: %v", tc.host, err)
	}
	require.NoError(t, Policy{AllowPrivate: true}.CheckHost(ctx, "127.0.0.1"))
}

// The dial-time check runs on the address being connected to, whatever
// the name resolved to earlier.
func TestDialRefusesPrivateAddresses(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	lookup := table(map[string]string{"cb.test": "127.0.0.1"})
	get := func(p Policy) error {
		tr := &http.Transport{DialContext: p.DialContext(&net.Dialer{})}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Get("http://cb.test:" + port + "/")
		if err == nil {
			_ = resp.Body.Close()
		}
		return err
	}
	require.ErrorIs(t, get(Policy{Lookup: lookup}), ErrBlocked)
	require.NoError(t, get(Policy{Lookup: lookup, AllowPrivate: true}), "allowed, the same dial connects")
	// Without a Lookup the dialer's own resolver runs, and Control still
	// sees the address.
	tr := &http.Transport{DialContext: Policy{}.DialContext(&net.Dialer{})}
	t.Cleanup(tr.CloseIdleConnections)
	_, err = (&http.Client{Transport: tr}).Get(srv.URL)
	require.ErrorIs(t, err, ErrBlocked)
}
