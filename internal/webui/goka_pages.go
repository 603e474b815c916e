package webui

import (
	"bytes"
	"embed"
	"io/fs"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// Goka's monitor and query pages load jQuery 1.11.0, lodash, d3 and
// Bootstrap from other sites (its web/templates/common/head.go.html).
// GokaPages serves them loading current copies of those from the binary
// instead (static/, with their licenses; see static/README.md), and
// forbids anything else with a Content-Security-Policy.

//go:embed static
var static embed.FS

// The vendored files, by the library whose remote copy they replace.
var (
	localScripts = []struct{ lib, src string }{
		{"bootstrap", "/static/js/bootstrap-3.4.1.min.js"},
		{"jquery", "/static/js/jquery-3.7.1.min.js"},
		{"lodash", "/static/js/lodash-4.18.1.min.js"},
		{"d3", "/static/js/d3-4.13.0.min.js"},
	}
	localStyles = []struct{ lib, href string }{ // the theme first: its URL names bootstrap too
		{"bootstrap-theme", "/static/css/bootstrap-theme-3.4.1.min.css"},
		{"bootstrap", "/static/css/bootstrap-3.4.1.min.css"},
	}
)

// remoteScript and remoteStyle find a script or a style sheet loaded from
// another site (an absolute or protocol-relative URL).
var (
	remoteScript = regexp.MustCompile(`<script[^>]*\ssrc=["']((?:https?:)?//[^"']*)["'][^>]*>\s*</script>`)
	remoteStyle  = regexp.MustCompile(`<link[^>]*\shref=["']((?:https?:)?//[^"']*)["'][^>]*>`)
)

// localHead replaces every remote script and style sheet of a page with
// the vendored copy of its library, or drops it (a web font).
func localHead(page []byte) []byte {
	page = remoteScript.ReplaceAllFunc(page, func(tag []byte) []byte {
		url := strings.ToLower(string(remoteScript.FindSubmatch(tag)[1]))
		for _, s := range localScripts {
			if strings.Contains(url, s.lib) {
				return []byte(`<script src="` + s.src + `"></script>`)
			}
		}
		return nil
	})
	return remoteStyle.ReplaceAllFunc(page, func(tag []byte) []byte {
		url := strings.ToLower(string(remoteStyle.FindSubmatch(tag)[1]))
		for _, s := range localStyles {
			if strings.Contains(url, s.lib) {
				return []byte(`<link rel="stylesheet" href="` + s.href + `">`)
			}
		}
		return nil
	})
}

// gokaCSP allows Goka's pages their own inline scripts and styles, and
// scripts, styles and requests of this server only.
const gokaCSP = "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// GokaPages serves h (Goka's pages among others) with the remote scripts
// and style sheets of its HTML replaced by the vendored ones (localHead)
// and, unless h set one, gokaCSP; and the vendored files at /static/.
func GokaPages(h http.Handler) http.Handler {
	files, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded directory exists
	}
	fileServer := http.StripPrefix("/static/", http.FileServerFS(files))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/static/") {
			w.Header().Set("X-Content-Type-Options", "nosniff")
			fileServer.ServeHTTP(w, r)
			return
		}
		rec := &recorder{header: http.Header{}, code: http.StatusOK}
		h.ServeHTTP(rec, r)
		body := rec.body.Bytes()
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		ct := rec.header.Get("Content-Type")
		if ct == "" {
			ct = http.DetectContentType(body)
			w.Header().Set("Content-Type", ct)
		}
		if strings.HasPrefix(ct, "text/html") {
			body = localHead(body)
			if rec.header.Get("Content-Security-Policy") == "" { // ivrsched's own page has a stricter one
				w.Header().Set("Content-Security-Policy", gokaCSP)
			}
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(rec.code)
		_, _ = w.Write(body) // the client went away: nothing to do
	})
}

// recorder keeps a response to rewrite it.
type recorder struct {
	header http.Header
	code   int
	wrote  bool
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.code, r.wrote = code, true
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.body.Write(b)
}
