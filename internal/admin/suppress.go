package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/internal/phone"
	"github.com/ivrsched/ivrsched/internal/redact"
	"github.com/ivrsched/ivrsched/internal/suppress"
	"github.com/ivrsched/ivrsched/topology"
)

// The do-not-call list's admin API, on the admin listener, always behind
// the admin token (also where the listener takes requests without one:
// an instance without a token answers 403). Entries are by the keyed hash
// of their number (internal/suppress): no answer holds a number, not even
// the one asked about, and nothing logged does.
//
//	GET  /admin/suppressions[?limit=N]    the entries, by key (SuppressionList)
//	POST /admin/suppressions              {"number", "reason", "until"}: add (SuppressionEntry)
//	POST /admin/suppressions/check        {"number"}: listed? (SuppressionCheck)
//	POST /admin/suppressions/remove       {"number"} or {"key"}: remove
//
// until is an RFC 3339 time or a duration from now ("720h"); empty: never.

// SuppressionsPath is where the API answers.
const SuppressionsPath = "/admin/suppressions"

// SuppressionStore reads and writes the list: KafkaSuppressions, or a
// stand-in in tests.
type SuppressionStore interface {
	// Write stores e under hash, or removes the entry (e nil).
	Write(ctx context.Context, hash string, e *pb.Suppression) error
	// Lookup returns the entry under hash, or nil.
	Lookup(ctx context.Context, hash string) (*suppress.Entry, error)
	// ReadAll returns every entry.
	ReadAll(ctx context.Context) ([]suppress.Entry, error)
}

// KafkaSuppressions is the list on the ivr-suppressions topic; every call
// reads the topic to its end (the list is small: about 100 bytes an entry).
type KafkaSuppressions struct {
	Kafka  kafkaclient.Kafka
	Topics topology.Topics
}

func (k KafkaSuppressions) Write(ctx context.Context, hash string, e *pb.Suppression) error {
	return suppress.Write(ctx, k.Kafka, k.Topics, hash, e)
}

func (k KafkaSuppressions) Lookup(ctx context.Context, hash string) (*suppress.Entry, error) {
	return suppress.Lookup(ctx, k.Kafka, k.Topics, hash)
}

func (k KafkaSuppressions) ReadAll(ctx context.Context) ([]suppress.Entry, error) {
	return suppress.ReadAll(ctx, k.Kafka, k.Topics)
}

// SuppressionEntry is an entry as the API shows it: its key (the keyed
// hash of the number), never the number.
type SuppressionEntry struct {
	Key     string     `json:"key"`
	Reason  string     `json:"reason,omitempty"`
	AddedAt *time.Time `json:"added_at,omitempty"`
	Until   *time.Time `json:"until,omitempty"`
	Source  string     `json:"source,omitempty"`
	// Active: the entry suppresses now (no until, or until is later).
	Active bool `json:"active"`
	// Unreadable: the stored value does not decode (it suppresses).
	Unreadable bool `json:"unreadable,omitempty"`
}

// SuppressionList is the answer of GET /admin/suppressions: the entries
// ordered by key, at most the limit asked (100 by default), and how many
// there are in all.
type SuppressionList struct {
	Entries []SuppressionEntry `json:"entries"`
	Total   int                `json:"total"`
}

// SuppressionCheck is the answer of /admin/suppressions/check: whether the
// number is suppressed now, and the entry if it is listed.
type SuppressionCheck struct {
	Suppressed bool              `json:"suppressed"`
	Entry      *SuppressionEntry `json:"entry,omitempty"`
}

// SuppressionRequest is the body of the POST requests.
type SuppressionRequest struct {
	Number string `json:"number,omitempty"`
	Key    string `json:"key,omitempty"` // remove only: an entry by its key
	Reason string `json:"reason,omitempty"`
	Until  string `json:"until,omitempty"`
}

// Suppressions serves the API. Its methods are safe for concurrent use.
type Suppressions struct {
	Store SuppressionStore
	// Key is the deployment's suppression key; nil: the API answers 503.
	Key suppress.Key
	// Token is the admin token; empty: the API answers 403.
	Token    string
	Attempts *Attempts
	Clock    clock.Clock // nil: the real clock
	Logger   *slog.Logger
}

func (s *Suppressions) now() time.Time {
	if s.Clock == nil {
		return time.Now()
	}
	return s.Clock.Now()
}

// ErrBadRequest wraps what a request to the list asks wrongly; the message
// says what is accepted, and never holds the number.
var ErrBadRequest = errors.New("bad request")

func bad(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}

// hashOf checks a number and returns its key.
func (s *Suppressions) hashOf(number string) (string, error) {
	if number == "" {
		return "", bad("number: required; want a number in E.164 form like +4915112345678")
	}
	n, err := phone.Parse(number)
	if err != nil {
		why := "not a valid number"
		var ie *phone.InvalidError
		if errors.As(err, &ie) {
			why = ie.Reason
		}
		return "", bad("number: %s; want a valid number in E.164 form like +4915112345678", why)
	}
	return s.Key.Hash(n.E164), nil
}

var keyPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Add lists the number of req with its reason and until (source admin)
// and returns the entry.
func (s *Suppressions) Add(ctx context.Context, req SuppressionRequest) (SuppressionEntry, error) {
	hash, err := s.hashOf(req.Number)
	if err != nil {
		return SuppressionEntry{}, err
	}
	switch {
	case len(req.Reason) > suppress.MaxReasonBytes:
		return SuppressionEntry{}, bad("reason: %d bytes; want at most %d", len(req.Reason), suppress.MaxReasonBytes)
	case !utf8.ValidString(req.Reason):
		return SuppressionEntry{}, bad("reason: not valid UTF-8")
	}
	now := s.now()
	e := &pb.Suppression{Reason: req.Reason, AddedAt: timestamppb.New(now), Source: pb.Suppression_SOURCE_ADMIN}
	if req.Until != "" {
		t, err := ParseUntil(req.Until, now)
		if err != nil {
			return SuppressionEntry{}, err
		}
		e.Until = timestamppb.New(t)
	}
	if err := s.Store.Write(ctx, hash, e); err != nil {
		return SuppressionEntry{}, err
	}
	s.log().Info("number added to the do-not-call list through the admin API", "entry", hash[:16], "until", req.Until)
	return entryOf(hash, e, now), nil
}

// Remove takes the entry of req's number, or of its key, off the list and
// returns the key.
func (s *Suppressions) Remove(ctx context.Context, req SuppressionRequest) (string, error) {
	hash := req.Key
	if req.Number != "" || hash == "" {
		var err error
		if hash, err = s.hashOf(req.Number); err != nil {
			return "", err
		}
	} else if !keyPattern.MatchString(hash) {
		return "", bad("key: want the 64 lowercase hex digits of an entry's key")
	}
	if err := s.Store.Write(ctx, hash, nil); err != nil {
		return "", err
	}
	s.log().Info("entry removed from the do-not-call list through the admin API", "entry", hash[:16])
	return hash, nil
}

// Check says whether req's number is suppressed now.
func (s *Suppressions) Check(ctx context.Context, req SuppressionRequest) (SuppressionCheck, error) {
	hash, err := s.hashOf(req.Number)
	if err != nil {
		return SuppressionCheck{}, err
	}
	en, err := s.Store.Lookup(ctx, hash)
	if err != nil || en == nil {
		return SuppressionCheck{}, err
	}
	e := entryOf(hash, en.Value, s.now())
	return SuppressionCheck{Suppressed: e.Active, Entry: &e}, nil
}

// List returns up to limit entries, ordered by key, and the total.
func (s *Suppressions) List(ctx context.Context, limit int) (SuppressionList, error) {
	all, err := s.Store.ReadAll(ctx)
	if err != nil {
		return SuppressionList{}, err
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Hash < all[j].Hash })
	out := SuppressionList{Entries: []SuppressionEntry{}, Total: len(all)}
	now := s.now()
	for _, en := range all[:min(limit, len(all))] {
		out.Entries = append(out.Entries, entryOf(en.Hash, en.Value, now))
	}
	return out, nil
}

// entryOf shows e, stored under hash (nil: it does not decode).
func entryOf(hash string, e *pb.Suppression, now time.Time) SuppressionEntry {
	out := SuppressionEntry{Key: hash}
	if e == nil {
		out.Active, out.Unreadable = true, true
		return out
	}
	// A reason is free text: whatever looks like a number in it is masked.
	out.Reason, out.Active = redact.Text(suppress.Reason(e)), suppress.Active(e, now)
	out.Source = strings.ToLower(strings.TrimPrefix(e.GetSource().String(), "SOURCE_"))
	if e.GetAddedAt() != nil {
		t := e.GetAddedAt().AsTime().UTC()
		out.AddedAt = &t
	}
	if e.GetUntil() != nil {
		t := e.GetUntil().AsTime().UTC()
		out.Until = &t
	}
	return out
}

// ParseUntil reads an entry's end: an RFC 3339 time or a positive
// duration from now; either in the future.
func ParseUntil(v string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(v); err == nil {
		if d <= 0 {
			return time.Time{}, bad("until: %v; want a positive duration like 720h, or an RFC 3339 time", d)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, bad("until: %q is neither an RFC 3339 time like 2027-06-01T00:00:00Z nor a duration like 720h", v)
	}
	if !t.After(now) {
		return time.Time{}, bad("until: %s is not in the future", v)
	}
	return t, nil
}

func (s *Suppressions) log() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

// maxSuppressionRequest bounds a request's body.
const maxSuppressionRequest = 4 << 10

// ServeHTTP serves SuppressionsPath and below.
func (s *Suppressions) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case s.Token == "":
		http.Error(w, "the do-not-call list's API is off: the instance has no admin token (IVRSCHED_ADMIN_TOKEN)", http.StatusForbidden)
		return
	case s.Attempts.Blocked(r):
		TooMany(w)
		return
	case !HasToken(r, s.Token):
		if r.Header.Get("Authorization") != "" {
			s.Attempts.Failed(r)
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="ivrsched admin", charset="UTF-8"`)
		http.Error(w, "401 unauthorized: the do-not-call list wants the admin token (as the password of basic auth, or a bearer token)", http.StatusUnauthorized)
		return
	case len(s.Key) == 0:
		http.Error(w, "no suppression key: the instance cannot tell the list's entries", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	route := r.Method + " " + strings.TrimSuffix(r.URL.Path, "/")
	if route == "GET "+SuppressionsPath {
		limit := 100
		if v := r.URL.Query().Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 100000 {
				http.Error(w, "limit: want 1 to 100000", http.StatusBadRequest)
				return
			}
			limit = n
		}
		l, err := s.List(ctx, limit)
		s.answer(w, http.StatusOK, l, err)
		return
	}
	var act func(SuppressionRequest) (any, error)
	code := http.StatusOK
	switch route {
	case "POST " + SuppressionsPath:
		code = http.StatusCreated
		act = func(q SuppressionRequest) (any, error) { return s.Add(ctx, q) }
	case "POST " + SuppressionsPath + "/check":
		act = func(q SuppressionRequest) (any, error) { return s.Check(ctx, q) }
	case "POST " + SuppressionsPath + "/remove":
		act = func(q SuppressionRequest) (any, error) {
			key, err := s.Remove(ctx, q)
			return map[string]any{"removed": err == nil, "key": key}, err
		}
	default:
		http.Error(w, "want GET "+SuppressionsPath+", or POST to it, to /check or /remove", http.StatusNotFound)
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		http.Error(w, "want an application/json body", http.StatusUnsupportedMediaType)
		return
	}
	var q SuppressionRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxSuppressionRequest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&q); err != nil {
		http.Error(w, `want a JSON object like {"number": "+4915112345678", "reason": "...", "until": "720h"}, at most 4 KiB`, http.StatusBadRequest)
		return
	}
	v, err := act(q)
	s.answer(w, code, v, err)
}

// answer writes v as JSON, or err: 400 for a bad request, else 502 (the
// list could not be read or written); no error's text holds a number.
func (s *Suppressions) answer(w http.ResponseWriter, code int, v any, err error) {
	if err != nil {
		if errors.Is(err, ErrBadRequest) {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.log().Warn("do-not-call list", "err", err)
		http.Error(w, "the do-not-call list: "+redact.Text(err.Error()), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
