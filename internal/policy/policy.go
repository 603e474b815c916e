// Package policy is the calling policy: when a follow-up call may be placed
// to a recipient. It holds the policy document (weekly open hours in the
// recipient's local time, blackout dates, a frequency cap and a spread, as a
// default and per-campaign overrides, and an optional allowlist of
// destination countries), its parser for YAML and JSON with an
// error per invalid field, its canonical encoding for the compacted topic
// `ivr-policies` with a version hash, and Effective, which moves a due time
// to the first instant the policy allows.
//
// A *Policy is immutable once built (Parse, Decode, Default) and safe for
// concurrent use: every partition goroutine of the scheduler may call
// Effective on the same one.
package policy

import (
	"fmt"
	"time"

	"github.com/ivrsched/ivrsched/internal/calendar"
)

// Limits of the document.
const (
	// MaxSpread bounds the spread.
	MaxSpread = 12 * time.Hour
	// MaxCapPer bounds the cap's rolling period: the scheduler keeps the
	// call times of a user for that long.
	MaxCapPer = 366 * 24 * time.Hour
	// MaxCapCalls bounds the cap's number of calls.
	MaxCapCalls = 1000
	// MaxBlackoutDays bounds one blackout's length (from and to included).
	MaxBlackoutDays = 366
	// MaxPause bounds a pause: paused_until at most this long after the
	// due times it holds (Effective looks no further than Horizon).
	MaxPause = 366 * 24 * time.Hour
	// Horizon bounds the search: Effective looks this far past the due time
	// for an allowed instant, and fails with ErrNoOpening beyond it.
	Horizon = 400 * 24 * time.Hour
)

// Policy is a calling policy: the default rules and per-campaign overrides.
type Policy struct {
	// Default applies to every call, with every field set (Parse fills in
	// what the document omits; see DefaultRules).
	Default Rules
	// Campaigns override the default for calls whose Action.campaign_id is
	// the key. An override replaces each field it sets, whole, and inherits
	// the fields it leaves out.
	Campaigns map[string]Rules
	// Countries, when set, are the only regions (ISO 3166-1 alpha-2, as
	// phone.Number.Region, sorted) whose numbers are called: a follow-up
	// to a number of another region, or to a non-geographic number, is
	// refused (Effective: ErrCountry). Nil: every country.
	Countries []string

	version  string
	compiled map[string]*compiled // by campaign; "" is the default
	capCalls int                  // the most calls any cap counts
	capPer   time.Duration        // the longest period any cap counts in
	retries  bool                 // some rules retry
}

// Rules are the rules of the default or of one campaign. In a campaign
// override a nil field is inherited from the default.
type Rules struct {
	// OpenHours: a call may be placed when the recipient's local time is
	// inside one of them. Never empty when set.
	OpenHours []OpenHours
	// Blackouts: local dates on which no call is placed. Set and empty
	// (non-nil, length 0) in an override: none, whatever the default has.
	Blackouts []Blackout
	// Cap: at most Calls calls to a user in any Per. A Cap with Calls == 0
	// is no cap (the document's `cap: none`).
	Cap *Cap
	// Spread: a call deferred to the opening of a window is placed up to
	// this long after it, by a hash of its call id. Zero: at the opening.
	Spread *time.Duration
	// Retry: when a follow-up whose call ended unanswered is called again.
	// A Retry with no outcome retries nothing (the document's `retry:
	// none`).
	Retry *Retry
	// PausedUntil: no call is placed before this instant (`ivrsched pause
	// --campaign C --for D` sets it in C's override; `resume` removes it).
	// A call due before it goes at the first instant after it that the
	// other rules allow, spread like a window's opening. Nil: not paused.
	PausedUntil *time.Time
	// SuppressionExempt: calls of this campaign are placed even to numbers
	// on the do-not-call list (ivr-suppressions). Only a campaign override
	// may set it; the default is never exempt.
	SuppressionExempt bool
}

// OpenHours is one weekly rule: on each of Days, from From to To, in the
// recipient's local wall-clock time.
type OpenHours struct {
	Days []time.Weekday // sorted Monday first, no repeats
	From Clock
	To   Clock // after From; 24:00 is the end of the day
}

// Clock is a wall-clock time of day in seconds after midnight (0 to
// 86400, 86400 being 24:00, the end of the day), written "HH:MM".
type Clock int

// String writes the time as "HH:MM".
func (c Clock) String() string { return fmt.Sprintf("%02d:%02d", int(c)/3600, int(c)%3600/60) }

// Blackout is a named range of local dates, From to To included, on which
// no call is placed: everywhere, or only to numbers of Regions.
type Blackout struct {
	Name    string
	From    calendar.Date
	To      calendar.Date
	Regions []string // ISO 3166-1 alpha-2, sorted; empty: every region
}

// Cap is a frequency cap: at most Calls calls to a user in any period of
// length Per. Calls == 0 is no cap.
type Cap struct {
	Calls int
	Per   time.Duration
}

// DefaultRules are the rules when a document (or the whole policy) leaves
// them out: open 08:00 to 21:00 local time every day, no blackouts, no cap,
// no spread, no retries.
func DefaultRules() Rules {
	var spread time.Duration
	return Rules{
		OpenHours: []OpenHours{{Days: allDays(), From: 8 * 3600, To: 21 * 3600}},
		Blackouts: []Blackout{},
		Cap:       &Cap{},
		Spread:    &spread,
		Retry:     &Retry{},
	}
}

// Default is the policy in force when none was set: DefaultRules for
// every call.
func Default() *Policy {
	p, err := build(DefaultRules(), nil, nil)
	if err != nil {
		panic(err) // the default rules are valid
	}
	return p
}

func allDays() []time.Weekday {
	return []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday, time.Saturday, time.Sunday}
}

// Version identifies the policy's content: a hash of its canonical
// encoding (Encode). Two policies with the same rules have the same
// version; a scheduler compares versions to tell that the policy changed.
func (p *Policy) Version() string { return p.version }

// CapHistory is what a scheduler must remember of a user's calls for the
// policy's frequency caps: the calls of the last per, at most calls of them
// (the most any cap counts and the longest period any cap counts them in;
// 0 and 0 without a cap). A nil policy has no cap.
func (p *Policy) CapHistory() (calls int, per time.Duration) {
	if p == nil {
		return 0, 0
	}
	return p.capCalls, p.capPer
}

// RulesFor returns the rules in force for a campaign: the default with the
// campaign's override applied. An unknown or empty campaign gets the
// default.
func (p *Policy) RulesFor(campaign string) Rules {
	return p.rulesFor(campaign).rules
}

func (p *Policy) rulesFor(campaign string) *compiled {
	if c, ok := p.compiled[campaign]; ok {
		return c
	}
	return p.compiled[""]
}

// merge applies an override to the default rules.
func merge(def, o Rules) Rules {
	if o.OpenHours != nil {
		def.OpenHours = o.OpenHours
	}
	if o.Blackouts != nil {
		def.Blackouts = o.Blackouts
	}
	if o.Cap != nil {
		def.Cap = o.Cap
	}
	if o.Spread != nil {
		def.Spread = o.Spread
	}
	if o.Retry != nil {
		def.Retry = o.Retry
	}
	if o.PausedUntil != nil {
		def.PausedUntil = o.PausedUntil
	}
	def.SuppressionExempt = o.SuppressionExempt
	return def
}

// SuppressionExempt reports whether the policy exempts campaign from the
// do-not-call list: only a campaign override naming it does. A nil policy
// exempts none.
func (p *Policy) SuppressionExempt(campaign string) bool {
	if p == nil || campaign == "" {
		return false
	}
	c, ok := p.compiled[campaign]
	return ok && c.rules.SuppressionExempt
}

// RetryFor returns the retry rules of a campaign (never nil; one that
// retries nothing when retries are off).
func (p *Policy) RetryFor(campaign string) *Retry {
	return p.rulesFor(campaign).rules.Retry
}

// Retries reports whether the default or any campaign retries an outcome:
// the dialer reports calls' outcomes to the scheduler only then.
func (p *Policy) Retries() bool {
	return p != nil && p.retries
}

// build makes a policy from validated rules: it fills the default's unset
// fields, compiles each campaign's merged rules and computes the version.
func build(def Rules, campaigns map[string]Rules, countries []string) (*Policy, error) {
	def = merge(DefaultRules(), def)
	p := &Policy{Default: def, Campaigns: campaigns, Countries: countries, compiled: make(map[string]*compiled, len(campaigns)+1)}
	p.compiled[""] = compile(def)
	for name, o := range campaigns {
		p.compiled[name] = compile(merge(def, o))
	}
	for _, c := range p.compiled {
		if c.cap.Calls > 0 {
			p.capCalls, p.capPer = max(p.capCalls, c.cap.Calls), max(p.capPer, c.cap.Per)
		}
		p.retries = p.retries || c.rules.Retry.Enabled()
	}
	enc, err := p.encode()
	if err != nil {
		return nil, err
	}
	p.version = versionOf(enc)
	return p, nil
}
