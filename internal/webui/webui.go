// Package webui is ivrsched's own web page, served at /ui/ beside Goka's
// monitor and query pages: the next calls across the deployment, a user's
// follow-ups and calls, recent results, dead letters by reason and paused
// campaigns, and charts of the day (charts.go: SVG drawn here). It is
// server-rendered (html/template, no script). Phone
// numbers are masked. The one state-changing action, running a follow-up
// now, is a Kafka command (Source.RunNow) and needs the admin token.
package webui

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/admin"
	"github.com/ivrsched/ivrsched/internal/explain"
	"github.com/ivrsched/ivrsched/internal/redact"
)

// Source is what the page shows and does. Every function may be nil (that
// section is left out) and is called from the HTTP server's goroutines.
type Source struct {
	Upcoming func(ctx context.Context) ([]admin.Upcoming, error)
	User     func(ctx context.Context, id string) (admin.UserView, error)
	// Explain builds the user's decision trail (admin.Client.Explain), in
	// at most 10 s.
	Explain     func(ctx context.Context, id string) (explain.Trail, error)
	Results     func(ctx context.Context) ([]*pb.CallResult, error)
	DeadLetters func(ctx context.Context) (map[string]int, error)
	// Paused returns the paused campaigns and until when.
	Paused func() map[string]time.Time
	// UpcomingHours, Answers and Lateness feed the charts (charts.go).
	UpcomingHours func(ctx context.Context) (admin.UpcomingHours, error)
	Answers       func(ctx context.Context) (admin.AnswerRates, error)
	Lateness      func(ctx context.Context) ([]admin.LatenessMinute, error)
	// RunNow produces a RunNow command for the user's task.
	RunNow func(ctx context.Context, user, task string) error
	// Pause pauses a campaign until the given instant, or ends its pause
	// (until nil), in the stored calling policy (admin.Client.SetPause).
	Pause func(ctx context.Context, campaign string, until *time.Time) error
	// Suppressions is the do-not-call list (its page, /ui/suppressions).
	Suppressions *admin.Suppressions
	// Token guards the actions (RunNow, Pause); empty: they are off.
	Token string
	// Attempts limits the wrong tokens of a host (nil: no limit).
	Attempts *admin.Attempts
	Logger   *slog.Logger
}

//go:embed page.html
var pageHTML string

// pageCSP is the page's Content-Security-Policy: no script, its own style
// element only, forms to this server, no framing.
var pageCSP = func() string {
	_, rest, _ := strings.Cut(pageHTML, "<style>")
	style, _, _ := strings.Cut(rest, "</style>")
	sum := sha256.Sum256([]byte(style))
	return "default-src 'none'; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
}()

// messages are what the page says after an action (?msg=): only these.
var messages = map[string]string{
	"run-now": "Run now sent: the call shows below once it is placed.",
	"paused":  "Campaign paused: it is listed under Paused campaigns until the pause ends.",
	"resumed": "Campaign resumed: its held follow-ups go now (inside the calling window).",
}

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"t": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"mask": redact.Phone,
	// A result's detail is provider text: results written before the
	// providers masked it may quote the number.
	"maskText": redact.Text,
}).Parse(pageHTML))

// Handler serves the page at /ui/ and its actions at /ui/run-now,
// /ui/pause and /ui/resume.
func Handler(s Source) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ui/", s.page)
	mux.HandleFunc("POST /ui/run-now", form(s.runNow))
	mux.HandleFunc("POST /ui/pause", form(s.pause))
	mux.HandleFunc("POST /ui/resume", form(s.pause))
	mux.HandleFunc("GET /ui/suppressions", s.suppressionsPage)                  // suppress.go
	mux.HandleFunc("POST /ui/suppressions/{action}", form(s.suppressionAction)) // check, add, remove
	return mux
}

// maxForm is the most of an action's body that is read.
const maxForm = 64 << 10

// form reads an action's body, before anything else, as an urlencoded form
// of at most maxForm bytes: another type is refused unread (a multipart
// upload would be stored first), a longer body is cut.
func form(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/x-www-form-urlencoded" {
			http.Error(w, "want an application/x-www-form-urlencoded form", http.StatusUnsupportedMediaType)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if err := r.ParseForm(); err != nil {
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				http.Error(w, "the form is larger than 64 KiB", http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "the form does not parse", http.StatusBadRequest)
			return
		}
		h(w, r)
	}
}

// maxPause is the longest pause the page sets (policy.MaxPause).
const maxPause = 366 * 24 * time.Hour

type campaignPause struct {
	Campaign string
	Until    time.Time
}

type userData struct {
	ID        string
	Partition int32
	Found     bool
	State     *pb.UserState
	Dialer    *pb.DialerState
	Waiting   string // the task run now, until its call shows
	Calls     []*pb.DialRecord
	// Why the scheduler's or the dialer's stored value does not decode.
	SchedulerUnreadable, DialerUnreadable string
	// Trail is the user's decision trail (nil: not built).
	Trail *explain.Trail
}

type pageData struct {
	Errors      []string
	Message     string
	Upcoming    []admin.Upcoming
	User        *userData
	Results     []*pb.CallResult
	DeadLetters []reasonCount
	Paused      []campaignPause
	Charts      template.HTML
	Actions     bool // run now
	Pausing     bool // pause and resume
	Refresh     bool
}

type reasonCount struct {
	Reason string
	N      int
}

func (s Source) page(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	q := r.URL.Query()
	d := pageData{Message: messages[q.Get("msg")], Actions: s.Token != "" && s.RunNow != nil, Pausing: s.Token != "" && s.Pause != nil}
	fail := func(what string, err error) {
		d.Errors = append(d.Errors, what+": "+err.Error())
	}
	if id := q.Get("user"); id != "" && s.User != nil {
		v, err := s.User(ctx, id)
		u := &userData{ID: id, Partition: v.Partition, Waiting: q.Get("waiting"),
			SchedulerUnreadable: v.SchedulerUnreadable, DialerUnreadable: v.DialerUnreadable}
		if err != nil {
			fail("user", err)
		}
		if len(v.Scheduler) > 0 {
			u.State = new(pb.UserState)
			if err := protojson.Unmarshal(v.Scheduler, u.State); err != nil {
				fail("user", err)
			}
			u.Found = true
		}
		if len(v.Dialer) > 0 {
			u.Dialer = new(pb.DialerState)
			if err := protojson.Unmarshal(v.Dialer, u.Dialer); err != nil {
				fail("user", err)
			}
			u.Calls = append(u.Calls, u.Dialer.GetCalls()...)
			sort.SliceStable(u.Calls, func(i, j int) bool { return u.Calls[i].GetAt().AsTime().After(u.Calls[j].GetAt().AsTime()) })
		}
		if s.Explain != nil {
			ectx, cancel := context.WithTimeout(ctx, 10*time.Second) // leaves the rest of the page time
			tr, err := s.Explain(ectx, id)
			cancel()
			if err != nil {
				fail("decision trail", err)
			} else {
				u.Trail = &tr
			}
		}
		if u.Waiting != "" { // refresh until the call run now shows
			d.Refresh = true
			for _, c := range u.Calls {
				if c.GetTaskId() == u.Waiting {
					d.Refresh = false
				}
			}
		}
		d.User = u
	}
	if s.Upcoming != nil {
		var err error
		if d.Upcoming, err = s.Upcoming(ctx); err != nil {
			fail("upcoming", err)
		}
	}
	d.Charts = s.charts(ctx, fail)
	if s.Results != nil {
		var err error
		if d.Results, err = s.Results(ctx); err != nil {
			fail("results", err)
		}
	}
	if s.DeadLetters != nil {
		counts, err := s.DeadLetters(ctx)
		if err != nil {
			fail("dead letters", err)
		}
		for reason, n := range counts {
			d.DeadLetters = append(d.DeadLetters, reasonCount{reason, n})
		}
		sort.Slice(d.DeadLetters, func(i, j int) bool { return d.DeadLetters[i].Reason < d.DeadLetters[j].Reason })
	}
	if s.Paused != nil {
		for c, until := range s.Paused() {
			d.Paused = append(d.Paused, campaignPause{c, until})
		}
		sort.Slice(d.Paused, func(i, j int) bool { return d.Paused[i].Campaign < d.Paused[j].Campaign })
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", pageCSP)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if err := page.Execute(w, d); err != nil && s.Logger != nil {
		s.Logger.Warn("web page", "err", err)
	}
}

// allowed answers 403 unless the action is on and the request carries the
// admin token.
func (s Source) allowed(w http.ResponseWriter, r *http.Request, on bool) bool {
	if s.Token == "" || !on {
		http.Error(w, "actions are off: the instance has no admin token (IVRSCHED_ADMIN_TOKEN)", http.StatusForbidden)
		return false
	}
	if s.Attempts.Blocked(r) {
		admin.TooMany(w)
		return false
	}
	if subtle.ConstantTimeCompare([]byte(r.PostFormValue("token")), []byte(s.Token)) != 1 {
		s.Attempts.Failed(r)
		http.Error(w, "wrong admin token", http.StatusForbidden)
		return false
	}
	return true
}

// pause pauses a campaign for the form's duration (/ui/pause) or ends its
// pause (/ui/resume).
func (s Source) pause(w http.ResponseWriter, r *http.Request) {
	if !s.allowed(w, r, s.Pause != nil) {
		return
	}
	campaign := strings.TrimSpace(r.PostFormValue("campaign"))
	if campaign == "" {
		http.Error(w, "want a campaign id", http.StatusBadRequest)
		return
	}
	var until *time.Time
	msg := "resumed"
	if strings.HasSuffix(r.URL.Path, "/pause") {
		d, err := time.ParseDuration(strings.TrimSpace(r.PostFormValue("for")))
		if err != nil || d <= 0 || d > maxPause {
			http.Error(w, fmt.Sprintf("pause for %q: want a duration above 0 and at most 8784h, like 2h or 24h", r.PostFormValue("for")), http.StatusBadRequest)
			return
		}
		u := time.Now().Add(d).UTC().Truncate(time.Second)
		until = &u
		msg = "paused"
	}
	if err := s.Pause(r.Context(), campaign, until); err != nil {
		http.Error(w, "pause: "+err.Error(), http.StatusBadGateway)
		return
	}
	if s.Logger != nil {
		s.Logger.Info("pause from the web page", "campaign", campaign, "until", until)
	}
	http.Redirect(w, r, "/ui/?"+url.Values{"msg": {msg}}.Encode(), http.StatusSeeOther)
}

func (s Source) runNow(w http.ResponseWriter, r *http.Request) {
	if !s.allowed(w, r, s.RunNow != nil) {
		return
	}
	user, task := r.PostFormValue("user"), r.PostFormValue("task")
	if user == "" || task == "" {
		http.Error(w, "want user and task", http.StatusBadRequest)
		return
	}
	if err := s.RunNow(r.Context(), user, task); err != nil {
		http.Error(w, "run now: "+err.Error(), http.StatusBadGateway)
		return
	}
	if s.Logger != nil {
		s.Logger.Info("run now from the web page", "user", user, "task", task)
	}
	q := url.Values{"user": {user}, "waiting": {task}, "msg": {"run-now"}}
	http.Redirect(w, r, "/ui/?"+q.Encode(), http.StatusSeeOther)
}
