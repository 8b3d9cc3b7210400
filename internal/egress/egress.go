package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// ErrBlocked: the address is not public, and private addresses are not
// allowed.
var ErrBlocked = errors.New("not a public address")

// Prefixes outside the standard library's classes that are not the public
// internet either.
var blockedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // TEST-NET-1
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // TEST-NET-2
	netip.MustParsePrefix("203.0.113.0/24"),  // TEST-NET-3
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and broadcast
	netip.MustParsePrefix("192.88.99.0/24"),  // 6to4 relay anycast (deprecated): a relay into IPv6
	netip.MustParsePrefix("::/96"),           // IPv4-compatible (deprecated): embeds an IPv4 address
	netip.MustParsePrefix("::ffff:0:0:0/96"), // IPv4-translated (SIIT): embeds an IPv4 address, which Unmap does not see
	netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated, RFC 3879): still routed inside some sites
	netip.MustParsePrefix("2001:10::/28"),    // ORCHID: not routable
	netip.MustParsePrefix("2001:20::/28"),    // ORCHIDv2: not routable
	netip.MustParsePrefix("100::/64"),        // discard-only
	netip.MustParsePrefix("64:ff9b::/96"),    // NAT64: embeds an IPv4 address
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("2002::/16"),       // 6to4: embeds an IPv4 address
	netip.MustParsePrefix("2001::/32"),       // Teredo: embeds an IPv4 address
}

// Public reports whether ip is an address on the public internet. An
// IPv4-mapped IPv6 address is judged as the IPv4 address it carries.
func Public(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsUnspecified() || ip.IsLinkLocalUnicast() ||
		ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() || ip.IsMulticast() {
		return false
	}
	for _, p := range blockedPrefixes {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

// Lookup resolves a host name to addresses; net.DefaultResolver.LookupNetIP
// with network "ip" when nil. Tests give a fixed table instead of DNS.
type Lookup func(ctx context.Context, host string) ([]netip.Addr, error)

func systemLookup(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// Policy is one deployment's rule.
type Policy struct {
	// AllowPrivate lifts the check (CALLBACK_ALLOW_PRIVATE, development).
	AllowPrivate bool
	// Lookup resolves names; nil = the system resolver.
	Lookup Lookup
}

// Check refuses ip unless it is public or the policy allows private ones.
func (p Policy) Check(ip netip.Addr) error {
	if p.AllowPrivate || Public(ip) {
		return nil
	}
	return fmt.Errorf("%s: %w (CALLBACK_ALLOW_PRIVATE=true allows it for development)", ip.Unmap(), ErrBlocked)
}

// CheckHost refuses host (a URL's Hostname()) when it is a literal
// non-public address or resolves to one. A name that does not resolve is
// not refused here: the check at dial time still applies.
func (p Policy) CheckHost(ctx context.Context, host string) error {
	if p.AllowPrivate {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return p.Check(ip)
	}
	ips, err := p.lookup(ctx, host)
	if err != nil {
		return nil //nolint:nilerr // see above: unresolvable now is not refused, the dial re-checks
	}
	for _, ip := range ips {
		if err := p.Check(ip); err != nil {
			return fmt.Errorf("%s resolves to %w", host, err)
		}
	}
	return nil
}

func (p Policy) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if p.Lookup != nil {
		return p.Lookup(ctx, host)
	}
	return systemLookup(ctx, host)
}

// Control is a net.Dialer Control hook: it runs after resolution, with the
// address about to be connected, and refuses a non-public one.
func (p Policy) Control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dialled address %q: %w", address, ErrBlocked)
	}
	return p.Check(ap.Addr())
}

// DialContext dials through d, with the policy's Control hook, resolving
// names with the policy's Lookup when one is set (else d's own resolver).
// Every address is checked where it is connected to, so a name that
// resolved to a public address when the API accepted it but to a private
// one now is refused.
func (p Policy) DialContext(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	dd := *d
	dd.Control = p.Control
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if p.Lookup == nil {
			return dd.DialContext(ctx, network, addr)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		ips := []netip.Addr{}
		if ip, perr := netip.ParseAddr(host); perr == nil {
			ips = append(ips, ip)
		} else if ips, err = p.Lookup(ctx, host); err != nil {
			return nil, err
		}
		last := fmt.Errorf("egress: %s resolves to no address", host)
		for _, ip := range ips {
			c, err := dd.DialContext(ctx, network, net.JoinHostPort(ip.Unmap().String(), port))
			if err == nil {
				return c, nil
			}
			last = err
		}
		return nil, last
	}
}
