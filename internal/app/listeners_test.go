package app

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// Purposes given one address share its server by path: each serves its
// own paths (an entry ending in / a prefix), the one without paths the
// rest; a listener without such a part answers 404 elsewhere.
func TestListenersRouteByPath(t *testing.T) {
	named := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(name)) })
	}
	var ls listeners
	ls.add("127.0.0.1:9095", "probes", named("probes"), "/healthz", "/readyz", "/metrics")
	ls.add("127.0.0.1:9095", "admin", named("admin"))
	ls.add("127.0.0.1:9095", "pprof", named("pprof"), "/debug/pprof/")
	ls.add("0.0.0.0:9096", "callbacks", named("callbacks"), "/callbacks/")
	ls.add("", "none", named("none"))
	if len(ls.addrs) != 2 {
		t.Fatalf("listeners on %v", ls.addrs)
	}
	for _, c := range []struct{ addr, path, want string }{
		{"127.0.0.1:9095", "/healthz", "probes"},
		{"127.0.0.1:9095", "/metrics", "probes"},
		{"127.0.0.1:9095", "/metricsx", "admin"},
		{"127.0.0.1:9095", "/debug/pprof/heap", "pprof"},
		{"127.0.0.1:9095", "/ui/", "admin"},
		{"127.0.0.1:9095", "/", "admin"},
		{"0.0.0.0:9096", "/callbacks/twilio", "callbacks"},
		{"0.0.0.0:9096", "/healthz", "404 page not found\n"},
		{"0.0.0.0:9096", "/admin/user/u", "404 page not found\n"},
	} {
		rec := httptest.NewRecorder()
		handler(ls.parts[c.addr]).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.path, nil))
		if got := rec.Body.String(); got != c.want {
			t.Errorf("%s%s: served by %q, want %q", c.addr, c.path, got, c.want)
		}
	}
	for addr, want := range map[string]bool{"127.0.0.1:6060": true, "[::1]:6060": true, "localhost:6060": true, "0.0.0.0:6060": false, "10.0.0.7:6060": false, ":6060": false} {
		if IsLoopback(addr) != want {
			t.Errorf("IsLoopback(%s) = %v", addr, !want)
		}
	}
}
