package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// listeners are the process's web servers by purpose (Config.HTTP,
// AdminHTTP, CallbackHTTP, PprofHTTP). Purposes given the same address
// share one server: each serves its own paths there, and the part added
// without paths (the admin one) serves the rest.
type listeners struct {
	addrs []string
	parts map[string][]listenerPart
}

// listenerPart is one purpose's handler on a listener: the paths it
// serves (an entry ending in / is a prefix), none for every path the
// other parts do not serve.
type listenerPart struct {
	name  string
	paths []string
	h     http.Handler
}

// add serves h at addr for the given paths (none: every other path); an
// empty addr adds nothing.
func (l *listeners) add(addr, name string, h http.Handler, paths ...string) {
	if addr == "" {
		return
	}
	if l.parts == nil {
		l.parts = map[string][]listenerPart{}
	}
	if _, ok := l.parts[addr]; !ok {
		l.addrs = append(l.addrs, addr)
	}
	l.parts[addr] = append(l.parts[addr], listenerPart{name, paths, h})
}

// handler routes a request to the part that serves its path.
func handler(parts []listenerPart) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rest http.Handler
		for _, p := range parts {
			if p.paths == nil {
				rest = p.h
				continue
			}
			for _, path := range p.paths {
				if r.URL.Path == path || (strings.HasSuffix(path, "/") && strings.HasPrefix(r.URL.Path, path)) {
					p.h.ServeHTTP(w, r)
					return
				}
			}
		}
		if rest == nil {
			http.NotFound(w, r)
			return
		}
		rest.ServeHTTP(w, r)
	})
}

// serve listens on every address and serves in g until ctx ends.
func (l *listeners) serve(ctx context.Context, g *errgroup.Group, log *slog.Logger) error {
	for _, addr := range l.addrs {
		parts := l.parts[addr]
		names := make([]string, len(parts))
		for i, p := range parts {
			names[i] = p.name
		}
		what := strings.Join(names, ", ")
		if err := serveHTTP(ctx, g, addr, what, handler(parts), log); err != nil {
			return err
		}
	}
	return nil
}

func serveHTTP(ctx context.Context, g *errgroup.Group, addr, what string, h http.Handler, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("web server (%s) on %s: %w", what, addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute}
	log.Info("web server", "serves", what, "url", "http://"+ln.Addr().String()+"/")
	g.Go(func() error {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("web server (%s): %w", what, err)
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	return nil
}

// IsLoopback reports whether addr's host is a loopback address or
// localhost.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
