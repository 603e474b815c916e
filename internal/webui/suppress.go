package webui

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ivrsched/ivrsched/internal/admin"
	"github.com/ivrsched/ivrsched/internal/redact"
)

// The do-not-call list's section, a page of its own at /ui/suppressions:
// its entries by key (never a number), and forms to check, add and remove
// a number, each with the admin token. A number a form sends is only in
// the POST's body; the answers show it masked.

//go:embed suppress.html
var suppressHTML string

var suppressCSP = csp(suppressHTML)

// csp is the Content-Security-Policy of a page whose one style element is
// in html: no script, forms to this server, no framing.
func csp(html string) string {
	_, rest, _ := strings.Cut(html, "<style>")
	style, _, _ := strings.Cut(rest, "</style>")
	sum := sha256.Sum256([]byte(style))
	return "default-src 'none'; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
}

var suppressPage = template.Must(template.New("suppress").Funcs(template.FuncMap{
	"t": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"short": func(k string) string {
		if len(k) > 16 {
			return k[:16]
		}
		return k
	},
}).Parse(suppressHTML))

// suppressMessages are what the page says after an action (?msg=).
var suppressMessages = map[string]string{
	"added":   "Number added: it is not called from now on.",
	"removed": "Entry removed: its number is called again.",
}

type suppressData struct {
	On      bool
	Errors  []string
	Message string
	Entries []admin.SuppressionEntry
	Total   int
	Checked *checked
}

type checked struct {
	Masked string
	Result admin.SuppressionCheck
}

// suppressionsOn says whether the section's actions are on.
func (s Source) suppressionsOn() bool { return s.Suppressions != nil && s.Token != "" }

func (s Source) renderSuppressions(w http.ResponseWriter, r *http.Request, d suppressData) {
	d.On = s.suppressionsOn()
	if d.On {
		ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
		defer cancel()
		l, err := s.Suppressions.List(ctx, 200)
		if err != nil {
			d.Errors = append(d.Errors, "list: "+redact.Text(err.Error()))
		}
		d.Entries, d.Total = l.Entries, l.Total
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", suppressCSP)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if err := suppressPage.Execute(w, d); err != nil && s.Logger != nil {
		s.Logger.Warn("do-not-call page", "err", err)
	}
}

func (s Source) suppressionsPage(w http.ResponseWriter, r *http.Request) {
	s.renderSuppressions(w, r, suppressData{Message: suppressMessages[r.URL.Query().Get("msg")]})
}

// suppressionAction serves /ui/suppressions/{check,add,remove}.
func (s Source) suppressionAction(w http.ResponseWriter, r *http.Request) {
	if !s.allowed(w, r, s.Suppressions != nil) {
		return
	}
	req := admin.SuppressionRequest{Number: strings.TrimSpace(r.PostFormValue("number")), Key: strings.TrimSpace(r.PostFormValue("key")),
		Reason: r.PostFormValue("reason"), Until: strings.TrimSpace(r.PostFormValue("until"))}
	var err error
	msg := ""
	switch r.PathValue("action") {
	case "check":
		var c admin.SuppressionCheck
		if c, err = s.Suppressions.Check(r.Context(), req); err == nil {
			s.renderSuppressions(w, r, suppressData{Checked: &checked{Masked: redact.Phone(req.Number), Result: c}})
			return
		}
	case "add":
		_, err = s.Suppressions.Add(r.Context(), req)
		msg = "added"
	case "remove":
		_, err = s.Suppressions.Remove(r.Context(), req)
		msg = "removed"
	default:
		http.NotFound(w, r)
		return
	}
	switch {
	case errors.Is(err, admin.ErrBadRequest):
		http.Error(w, err.Error(), http.StatusBadRequest)
	case err != nil:
		http.Error(w, "the do-not-call list: "+redact.Text(err.Error()), http.StatusBadGateway)
	default:
		http.Redirect(w, r, "/ui/suppressions?"+url.Values{"msg": {msg}}.Encode(), http.StatusSeeOther)
	}
}
