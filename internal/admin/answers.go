package admin

import (
	"hash/fnv"
	"sync"
	"time"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

// AnswerDays is how far back the answer rate counts.
const AnswerDays = 7

// answerSlots is the ring of hours the answer counter keeps: the last
// AnswerDays days and the next hour (a clock ahead of ours).
const answerSlots = AnswerDays*24 + 1

// maxZones bounds the zones the counter remembers by name: zone names come
// from the results' producers.
const maxZones = 1024

// The counter's memory of the call ids it counted: recentSets sets of
// recentWays fingerprints (64-bit hashes of the id), each set the last ids
// that fell in it, 128 KiB in all.
const (
	recentSets = 4096
	recentWays = 4
)

// AnswerCounter counts final call results by the hour they came in and by
// the recipient's local hour: (7 × 24 + 1) hours × 24 local hours × 5
// outcomes, a fixed 160 KiB whatever the volume, the oldest hour's counts
// cleared as the clock passes a new one. Safe for concurrent use.
//
// A call's final result counts once: the dialer publishes it again with
// the same call id when it replays its statuses after a restart, right
// behind the first in the same partition. The counter remembers the ids
// it counted in a fixed table of 16,384 fingerprints (128 KiB): a repeat
// is missed, and counted, only after four other counted calls fell in its
// set of the table in between (about one in 8,000 with a thousand results
// between the two).
type AnswerCounter struct {
	mu    sync.Mutex
	slots [answerSlots]answerSlot
	zones map[string]*time.Location // nil: not a zone
	seen  [recentSets][recentWays]uint64
}

// repeat reports whether the counter counted call id before (as far as it
// remembers), and remembers it. An empty id is never a repeat. Called with
// c.mu held.
func (c *AnswerCounter) repeat(id string) bool {
	if id == "" {
		return false
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	fp := h.Sum64() | 1 // 0 is an empty way
	set := &c.seen[fp%recentSets]
	for _, v := range set {
		if v == fp {
			return true
		}
	}
	copy(set[1:], set[:recentWays-1])
	set[0] = fp
	return false
}

type answerSlot struct {
	hour    int64 // unix hour the counts are of; 0 with none
	counts  [24][outcomeClasses]uint64
	unknown uint64
}

const outcomeClasses = 5

// outcomeClass is where a final outcome counts: answered, no answer, busy,
// failed, other (machine, canceled); -1: not counted (not placed, or not
// final).
func outcomeClass(o pb.Outcome) int {
	switch o {
	case pb.Outcome_OUTCOME_ANSWERED:
		return 0
	case pb.Outcome_OUTCOME_NO_ANSWER:
		return 1
	case pb.Outcome_OUTCOME_BUSY:
		return 2
	case pb.Outcome_OUTCOME_FAILED:
		return 3
	case pb.Outcome_OUTCOME_MACHINE, pb.Outcome_OUTCOME_CANCELED:
		return 4
	}
	return -1
}

// zone loads a recipient zone, remembering at most maxZones names.
func (c *AnswerCounter) zone(name string) *time.Location {
	if name == "" || name == "Local" || len(name) > 64 {
		return nil
	}
	if loc, ok := c.zones[name]; ok {
		return loc
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		loc = nil
	}
	if c.zones == nil {
		c.zones = map[string]*time.Location{}
	}
	if len(c.zones) < maxZones {
		c.zones[name] = loc
	}
	return loc
}

// Add counts a result read at now: a final one with a counted outcome and
// a time within the last AnswerDays days (or the next hour), once per call
// id. It reports whether it counted.
func (c *AnswerCounter) Add(r *pb.CallResult, now time.Time) bool {
	class := outcomeClass(r.GetOutcome())
	if !r.GetFinal() || class < 0 || r.GetAt() == nil {
		return false
	}
	at := r.GetAt().AsTime()
	h, nowH := at.Unix()/3600, now.Unix()/3600
	if at.Unix() < 0 || h <= nowH-answerSlots+1 || h > nowH+1 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.repeat(r.GetCallId()) {
		return false
	}
	s := &c.slots[h%answerSlots]
	if s.hour != h {
		*s = answerSlot{hour: h}
	}
	loc := c.zone(r.GetRecipientZone())
	if loc == nil {
		s.unknown++
		return true
	}
	s.counts[at.In(loc).Hour()][class]++
	return true
}

// Rates sums the hours of the last AnswerDays days before now.
func (c *AnswerCounter) Rates(now time.Time) AnswerRates {
	nowH := now.Unix() / 3600
	first := nowH - answerSlots + 2
	out := AnswerRates{Since: time.Unix(first*3600, 0).UTC(), Until: now.UTC(), Hours: make([]AnswerHour, 24)}
	for i := range out.Hours {
		out.Hours[i].Hour = i
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.slots {
		s := &c.slots[i]
		if s.hour < first || s.hour > nowH+1 {
			continue
		}
		out.UnknownZone += s.unknown
		for lh := range s.counts {
			h := &out.Hours[lh]
			h.Answered += s.counts[lh][0]
			h.NoAnswer += s.counts[lh][1]
			h.Busy += s.counts[lh][2]
			h.Failed += s.counts[lh][3]
			h.Other += s.counts[lh][4]
		}
	}
	return out
}
