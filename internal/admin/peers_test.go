package admin

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
)

// An announced URL is taken only as http(s)://host[:port][/].
func TestCheckURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://10.0.0.7:9096":                        "http://10.0.0.7:9096",
		"https://ivrsched-0.ivrsched:9096/":           "https://ivrsched-0.ivrsched:9096",
		"http://127.0.0.1:8080/latest/meta-data/iam#": "",
		"http://127.0.0.1:8080#":                      "",
		"http://127.0.0.1:8080/latest/meta-data/iam":  "",
		"http://127.0.0.1:8080?x=1":                   "",
		"http://127.0.0.1:8080?":                      "",
		"http://user:pw@127.0.0.1:8080":               "",
		"file:///etc/passwd":                          "",
		"gopher://127.0.0.1:70":                       "",
		"127.0.0.1:8080":                              "",
	} {
		got, err := CheckURL(in)
		if got != want || (want == "") != errors.Is(err, ErrRefusedURL) {
			t.Errorf("CheckURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// Only addresses in the networks are dialed, never link-local ones (the
// cloud metadata service), whatever the networks; and nothing a peer
// answers is quoted in an error.
func TestPeersAndNoEcho(t *testing.T) {
	p, err := ParsePeers("10.0.0.0/16, 127.0.0.1, 169.254.0.0/16")
	if err != nil {
		t.Fatal(err)
	}
	for a, want := range map[string]bool{"10.0.3.4": true, "10.1.0.1": false, "127.0.0.1": true, "127.0.0.2": false, "169.254.169.254": false, "::ffff:10.0.0.1": true} {
		if got := p.Allows(netip.MustParseAddr(a)); got != want {
			t.Errorf("Allows(%s) = %v", a, got)
		}
	}
	if _, err := ParsePeers("10.0.0.0/33"); err == nil {
		t.Error("10.0.0.0/33 parsed")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/admin/user/moved" {
			http.Redirect(w, r, "http://169.254.169.254/latest/", http.StatusFound)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusTeapot)
		w.Write([]byte("SECRET-BODY"))
	}))
	defer srv.Close()
	var v User
	far := &Client{Peers: &Peers{Nets: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}}
	if err := far.get(context.Background(), srv.URL, []string{"admin", "user", "u"}, nil, &v); !errors.Is(err, ErrRefusedURL) {
		t.Errorf("a peer outside the networks: %v", err)
	}
	near := &Client{Peers: &Peers{Nets: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}}
	if err := near.get(context.Background(), srv.URL, []string{"admin", "user", "u"}, nil, &v); err == nil || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("a peer's 418 answer: %v", err)
	}
	if err := near.get(context.Background(), srv.URL, []string{"admin", "user", "moved"}, nil, &v); !errors.Is(err, ErrRefusedURL) {
		t.Errorf("a redirect: %v", err)
	}
}

// A client reuses its connections: asking an instance again does not
// open another (nor leave the last one idle for good).
func TestClientReusesConnections(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(`{"user_id":"u"}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c := &Client{Peers: &Peers{Nets: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}}
	for range 5 {
		var v User
		if err := c.get(context.Background(), srv.URL, []string{"admin", "user", "u"}, nil, &v); err != nil {
			t.Fatal(err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("5 requests opened %d connections, want 1", n)
	}
}
