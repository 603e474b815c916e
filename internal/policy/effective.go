package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ivrsched/ivrsched/internal/calendar"
	"github.com/ivrsched/ivrsched/internal/phone"
)

// ErrNoOpening means no instant within Horizon of the due time is allowed
// for the recipient: the windows of the recipient's zones never overlap,
// or blackouts cover them all.
var ErrNoOpening = errors.New("the policy allows no call")

// ErrCountry means the number's region is not one of the policy's
// Countries. An error that wraps it wraps ErrNoOpening too: the policy
// allows no call to the recipient.
var ErrCountry = errors.New("the destination country is not in the policy's countries")

// ErrNoZone means the request has no time zone (phone.ErrNoZone): the
// policy never falls back to UTC.
var ErrNoZone = phone.ErrNoZone

// Reason says why the effective time differs from the due time.
type Reason int

// The reasons. ReasonNone: the call goes at its due time.
const (
	ReasonNone     Reason = iota
	ReasonWindow          // the due time is outside the open hours
	ReasonBlackout        // the due time falls on a blackout date
	ReasonCap             // the frequency cap is reached at the due time
	ReasonPaused          // the campaign is paused at the due time (Rules.PausedUntil)
	ReasonSpread          // the spread past a window's opening (only in Result.Steps)
)

// String is the reason's name as reports carry it: none, window, blackout,
// cap, paused, spread.
func (r Reason) String() string {
	switch r {
	case ReasonNone:
		return "none"
	case ReasonWindow:
		return "window"
	case ReasonBlackout:
		return "blackout"
	case ReasonCap:
		return "cap"
	case ReasonPaused:
		return "paused"
	case ReasonSpread:
		return "spread"
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

// Request is one call to place.
type Request struct {
	// Due is when the call is due (the requested time).
	Due time.Time
	// Zones are the recipient's time zones: the user's zone, or every zone
	// of the number (phone.Zones). The call goes when all of them are open.
	// At least one.
	Zones []*time.Location
	// Region is the number's ISO 3166-1 alpha-2 region (phone.Number.Region)
	// for regional blackouts; "" applies only blackouts without regions.
	Region string
	// Campaign is the call's Action.campaign_id: its override applies.
	Campaign string
	// CallID seeds the spread: the same id always gets the same offset.
	CallID string
	// Recent are the user's other calls, placed or planned, near Due, for
	// the frequency cap: those within the cap's period of the answer count
	// (a call with CallID's id is ignored, so a replay counts nothing twice).
	Recent []Call
}

// Result is where a call goes and why.
type Result struct {
	// At is the effective time: the first instant at or after Due that the
	// policy allows, plus the spread when the call was deferred to the
	// opening of a window. Never before Due.
	At time.Time
	// Reason is why At differs from Due (ReasonNone when it does not).
	Reason Reason
	// Blackout names the blackout when Reason is ReasonBlackout.
	Blackout string
	// Steps are the moves from Due to At, in order, each by one rule: a
	// pause, a closed window or blackout, the spread, the cap. None when At
	// is Due.
	Steps []Step
}

// Step is one move of a call's time by one rule of the policy, from From
// to To.
type Step struct {
	Reason   Reason
	From, To time.Time
	// Blackout names a blackout date the move skipped (ReasonBlackout).
	Blackout string
}

// Effective is where a call goes under the policy:
//
//   - at its due time if, in every zone of the recipient, the local time is
//     inside the open hours of its campaign, the local date is not a
//     blackout for the recipient's region, and a call then keeps the user
//     within the frequency cap;
//   - else at the first later instant where all of that holds. When that
//     instant is the opening of a window (not the due time, and not a point
//     inside a window where the cap frees up), the call is spread: placed
//     up to Spread after the opening, by a hash of its call id, and never
//     at or after the window's close.
//
// It is a pure function of the policy and the request: the same inputs
// give the same answer, on any instance, in a replay. It looks at most
// Horizon past the due time and fails with ErrNoOpening beyond; a request
// without zones fails with ErrNoZone, one to a region not in Countries
// with ErrCountry (and ErrNoOpening).
func (p *Policy) Effective(r Request) (Result, error) {
	if len(r.Zones) == 0 {
		return Result{}, fmt.Errorf("%w: the request has no time zone", ErrNoZone)
	}
	if p.Countries != nil && !slices.Contains(p.Countries, r.Region) {
		return Result{}, fmt.Errorf("%w: %w: region %q is not one of %s", ErrNoOpening, ErrCountry, r.Region, strings.Join(p.Countries, ", "))
	}
	c := p.rulesFor(r.Campaign)
	limit := r.Due.Add(Horizon)
	var others []time.Time
	if c.cap.Calls > 0 {
		others = capCalls(r.Recent, r.CallID)
	}
	t := r.Due
	paused := false
	var steps []Step
	if pu := c.rules.PausedUntil; pu != nil && pu.After(t) {
		steps = append(steps, Step{Reason: ReasonPaused, From: t, To: *pu})
		t, paused = *pu, true
	}
	dueOpen := false
	for first := true; ; first = false {
		s, e, ok := c.open(r.Zones, r.Region, t, c.spread, limit)
		if !ok {
			return Result{}, fmt.Errorf("%w: nothing is open in all of %s within %s after %s", ErrNoOpening, zoneNames(r.Zones), formatDuration(Horizon), r.Due.UTC().Format(time.RFC3339))
		}
		if first {
			dueOpen = s.Equal(r.Due)
		}
		if s.After(t) {
			steps = append(steps, c.closedStep(r, t, s))
		}
		at := s
		// A pause's end is spread like a window's opening.
		if (s.After(t) || (first && paused)) && c.spread > 0 {
			at = s.Add(spreadOffset(r.CallID, min(c.spread, e.Sub(s))))
			if at.After(s) {
				steps = append(steps, Step{Reason: ReasonSpread, From: s, To: at})
			}
		}
		if c.cap.Calls > 0 && !capAllows(at, c.cap, others) {
			next := capNext(at, c.cap.Per, others)
			if next.IsZero() {
				return Result{}, fmt.Errorf("policy: the cap refuses %s but no call is near it (a bug)", at.UTC().Format(time.RFC3339))
			}
			steps = append(steps, Step{Reason: ReasonCap, From: at, To: next})
			t = next
			continue
		}
		if paused {
			return Result{At: at, Reason: ReasonPaused, Steps: steps}, nil
		}
		res := c.result(r, at, dueOpen)
		if res.Reason != ReasonNone {
			res.Steps = steps
		}
		return res, nil
	}
}

// result says why at differs from the due time: a blackout or the window
// when the due time was not open, else the cap.
func (c *compiled) result(r Request, at time.Time, dueOpen bool) Result {
	switch {
	case at.Equal(r.Due):
		return Result{At: at}
	case dueOpen:
		return Result{At: at, Reason: ReasonCap}
	}
	for _, z := range r.Zones {
		if name, black := c.blackedOut(calendar.DateOf(r.Due, z), r.Region); black {
			return Result{At: at, Reason: ReasonBlackout, Blackout: name}
		}
	}
	return Result{At: at, Reason: ReasonWindow}
}

// closedStep is the move from t to s, the first open instant after it:
// by a blackout if a date it skips is blacked out for the recipient in one
// of the zones, else by the open hours.
func (c *compiled) closedStep(r Request, t, s time.Time) Step {
	if len(c.blackouts) > 0 {
		for _, z := range r.Zones {
			last := calendar.DateOf(s, z)
			for d := calendar.DateOf(t, z); d.Compare(last) <= 0; d = d.AddDays(1) {
				if name, black := c.blackedOut(d, r.Region); black {
					return Step{Reason: ReasonBlackout, From: t, To: s, Blackout: name}
				}
			}
		}
	}
	return Step{Reason: ReasonWindow, From: t, To: s}
}

func zoneNames(zones []*time.Location) string {
	names := make([]string, len(zones))
	for i, z := range zones {
		names[i] = z.String()
	}
	return strings.Join(names, ", ")
}
