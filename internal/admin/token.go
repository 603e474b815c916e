package admin

import (
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"
)

// The admin listener (the admin API, the web page, Goka's pages) answers
// only requests that carry the deployment's admin token: the CLI sends it
// as a bearer token, a browser as the password of HTTP basic auth (any
// user name), which it asks for once.

// ErrUnauthorized: an instance answered 401, the request lacked its admin
// token (or carried another).
var ErrUnauthorized = errors.New("401 Unauthorized: the instance wants its admin token")

// HasToken reports whether r carries token (a bearer token, or basic
// auth's password).
func HasToken(r *http.Request, token string) bool {
	if token == "" {
		return false
	}
	got := ""
	if _, pw, ok := r.BasicAuth(); ok {
		got = pw
	} else if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		got = strings.TrimSpace(b)
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

// MinTokenLength is the shortest admin token an instance or the CLI takes.
const MinTokenLength = 16

// RequireToken serves h only to requests that carry token; the others get
// 401 with a basic-auth challenge, so that a browser asks for it. A wrong
// token counts in attempts (nil: no limit), and a host that failed too
// often gets 429.
func RequireToken(token string, attempts *Attempts, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if attempts.Blocked(r) {
			TooMany(w)
			return
		}
		if !HasToken(r, token) {
			if r.Header.Get("Authorization") != "" {
				attempts.Failed(r)
			}
			w.Header().Set("WWW-Authenticate", `Basic realm="ivrsched admin", charset="UTF-8"`)
			http.Error(w, "401 unauthorized: this listener wants the admin token (as the password of basic auth, or a bearer token)", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
