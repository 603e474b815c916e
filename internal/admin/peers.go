package admin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// Any member of a consumer group can announce any admin URL, and the CLI
// and the web page fetch what the members announce: an announcement is
// fetched only if CheckURL accepts it, and only from an address in the
// client's Peers, checked when the connection is made (after any DNS
// answer), never following a redirect.

// ErrRefusedURL: an announced admin URL that is not fetched.
var ErrRefusedURL = errors.New("announced admin URL refused")

// CheckURL checks an announced admin URL: http or https, a host, no user
// info, no query, no fragment, no path but "/". It returns the URL without
// a trailing slash.
func CheckURL(s string) (string, error) {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "", fmt.Errorf("%w: it does not parse", ErrRefusedURL)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("%w: scheme %q; want http or https", ErrRefusedURL, u.Scheme)
	case u.Host == "" || u.Opaque != "":
		return "", fmt.Errorf("%w: no host", ErrRefusedURL)
	case u.User != nil:
		return "", fmt.Errorf("%w: it has user info", ErrRefusedURL)
	case u.RawQuery != "" || u.ForceQuery:
		return "", fmt.Errorf("%w: it has a query", ErrRefusedURL)
	case u.Fragment != "" || strings.Contains(s, "#"):
		return "", fmt.Errorf("%w: it has a fragment", ErrRefusedURL)
	case u.Path != "" && u.Path != "/":
		return "", fmt.Errorf("%w: it has a path", ErrRefusedURL)
	}
	return u.Scheme + "://" + u.Host, nil
}

// Peers are the networks whose addresses a Client fetches announced admin
// URLs from. Link-local, multicast and unspecified addresses never are.
type Peers struct{ Nets []netip.Prefix }

// Allows reports whether a is in one of the networks.
func (p Peers) Allows(a netip.Addr) bool {
	a = a.Unmap()
	if a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsMulticast() || a.IsUnspecified() {
		return false
	}
	for _, n := range p.Nets {
		if n.Contains(a) {
			return true
		}
	}
	return false
}

// ParsePeers parses networks as CIDRs or single addresses, comma-separated.
func ParsePeers(s string) (Peers, error) {
	var p Peers
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if n, err := netip.ParsePrefix(f); err == nil {
			p.Nets = append(p.Nets, n.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return Peers{}, fmt.Errorf("%q is not a network like 10.0.0.0/16 or an address", f)
		}
		p.Nets = append(p.Nets, netip.PrefixFrom(a, a.BitLen()))
	}
	if len(p.Nets) == 0 {
		return Peers{}, errors.New("no network")
	}
	return p, nil
}

// DefaultPeers are loopback and the brokers' networks: the /24 (IPv6:
// /64) of each address their host names resolve to.
func DefaultPeers(ctx context.Context, brokers []string) Peers {
	p := Peers{Nets: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}
	for _, b := range brokers {
		host, _, err := net.SplitHostPort(b)
		if err != nil {
			host = b
		}
		addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			continue // the brokers' own errors say it
		}
		for _, a := range addrs {
			bits := 24
			if a = a.Unmap(); a.Is6() {
				bits = 64
			}
			if n, err := a.Prefix(bits); err == nil {
				p.Nets = append(p.Nets, n)
			}
		}
	}
	return p
}

// dialer dials only addresses p allows.
func (p Peers) dialer() *net.Dialer {
	return &net.Dialer{Timeout: 5 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil || !p.Allows(ap.Addr()) {
			return fmt.Errorf("%w: address %s is not in the allowed networks (--admin-networks)", ErrRefusedURL, address)
		}
		return nil
	}}
}
