package dueindex

import (
	"fmt"
	"testing"
	"time"

	"github.com/lovoo/goka/storage"

	"github.com/ivrsched/ivrsched/internal/clock"
)

// sentTick is a tick the punctuator sent, with the wall-clock time it was
// sent at.
type sentTick struct {
	part int32
	at   time.Time
}

func (s sentTick) String() string { return fmt.Sprintf("%d@t0+%v", s.part, s.at.Sub(t0)) }

// sim drives a Punctuator as Run does, on a fake clock: a round, the wait
// it asks for, a round. The ticks it sends are answered at once by a
// stand-in for the scheduler's tick (answer), as the processor would.
type sim struct {
	t      *testing.T
	p      *Punctuator
	mono   *clock.Fake // what Run waits on
	wall   clock.Clock // what the punctuator and the tick read
	stores map[int32]storage.Storage
	queue  []int32
	sent   []sentTick
	// version is the policy version in force (Config.Version).
	version string
	// lose drops the next ticks sent, unanswered, while positive.
	lose int
	// noRecord: the stand-in tick sweeps but does not record the version.
	noRecord bool
}

func newSim(t *testing.T, mono *clock.Fake, wall clock.Clock, opts ...func(*Config)) *sim {
	t.Helper()
	s := &sim{t: t, mono: mono, wall: wall, stores: make(map[int32]storage.Storage)}
	s.p = newTestPunctuator(t, wall, s.send, opts...)
	return s
}

func (s *sim) send(part int32, _ Pos) error {
	s.sent = append(s.sent, sentTick{part, s.wall.Now()})
	if s.lose > 0 {
		s.lose--
		return nil
	}
	s.queue = append(s.queue, part)
	return nil
}

func (s *sim) open(part int32) storage.Storage {
	st := open(s.t, s.p, "tbl", part, storage.NewMemory())
	s.stores[part] = st
	return st
}

func (s *sim) set(part int32, key string, v Value) {
	s.t.Helper()
	if err := s.stores[part].Set(key, encValue(v)); err != nil {
		s.t.Fatal(err)
	}
}

// answer stands in for the scheduler's tick: it takes what is due and the
// timers, sweeps the deferred follow-ups under the version in force, and
// writes the mark.
func (s *sim) answer(part int32) {
	x := s.p.Index(part)
	now := s.wall.Now()
	x.TakeTimers(now, 0)
	due := x.TakeDue(now, 0)
	_, swept, _ := x.SweepDeferred(s.version, 0)
	swept = swept && !s.noRecord
	if len(due) > 0 || swept {
		m := x.Mark()
		if len(due) > 0 {
			m.Through = due[len(due)-1]
		}
		if swept {
			m.Swept = s.version
		}
		s.set(part, markKey, Value{Mark: &m})
	}
	s.p.Ticked(part)
}

// run drives the punctuator for d of monotonic time.
func (s *sim) run(d time.Duration) {
	s.t.Helper()
	end := s.mono.Now().Add(d)
	for {
		wait := s.p.round()
		if wait <= 0 || wait > s.p.cfg.Recheck {
			s.t.Fatalf("the punctuator waits %v, want up to the recheck (%v)", wait, s.p.cfg.Recheck)
		}
		if q := s.queue; len(q) > 0 { // Ticked pokes Run: another round at once
			s.queue = nil
			for _, part := range q {
				s.answer(part)
			}
			continue
		}
		now := s.mono.Now()
		if !now.Before(end) {
			return
		}
		s.mono.Advance(min(wait, end.Sub(now)))
	}
}

func (s *sim) take() []sentTick {
	out := s.sent
	s.sent = nil
	return out
}

// An idle partition gets its first tick after the open and then none
// while nothing is due: neither one whose follow-ups are all due later nor
// one with nothing pending (before, each got a heartbeat tick a second).
// A held follow-up or retention timer due meanwhile gets its tick, and a
// follow-up scheduled after the idle stretch fires at its due time.
func TestIdlePartitionSendsNoTicks(t *testing.T) {
	clk := clock.NewFake(t0)
	s := newSim(t, clk, clk, func(c *Config) { c.Retain = 20 * time.Minute })
	s.open(0)
	s.open(1)
	s.open(2)
	s.set(0, "u", Value{Pending: []Task{{Due: t0.Add(time.Hour).UnixNano(), ID: "t"}}, LastActive: t0.Add(time.Hour).UnixNano()})
	s.set(2, "idle", Value{LastActive: t0.UnixNano()}) // nothing pending: retention timer at t0+20m
	s.run(30 * time.Minute)
	got := s.take()
	want := []sentTick{{0, t0}, {1, t0}, {2, t0}, {2, t0.Add(20 * time.Minute)}}
	if len(got) != len(want) {
		t.Fatalf("%d ticks in 30 idle minutes, want %d (the first after each open, the retention timer): %v", len(got), len(want), got)
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			found = found || g.part == w.part && g.at.Equal(w.at)
		}
		if !found {
			t.Fatalf("ticks %v, want %v", got, want)
		}
	}

	due := clk.Now().Add(2 * time.Second)
	s.set(1, "v", Value{Pending: []Task{{Due: due.UnixNano(), ID: "t"}}})
	s.run(10 * time.Second)
	got = s.take()
	if len(got) != 1 || got[0].part != 1 || got[0].at.Before(due) || got[0].at.After(due.Add(s.p.cfg.MinGap)) {
		t.Fatalf("ticks %v, want one of partition 1 at %v", got, due)
	}
	if m := s.p.Index(1).Mark().Through; m.User != "v" {
		t.Fatalf("mark %v, want past the follow-up", m)
	}
}

// steppedClock is a wall clock that steps: Now reads the monotonic fake
// plus step, After waits on the monotonic fake, as time.After does.
type steppedClock struct {
	*clock.Fake
	step time.Duration
}

func (c *steppedClock) Now() time.Time { return c.Fake.Now().Add(c.step) }

// The punctuator waits on a monotonic timer: a wall-clock step forward
// past a due time is caught at the next recheck, within a second.
func TestWallClockStepIsCaughtAtTheRecheck(t *testing.T) {
	mono := clock.NewFake(t0)
	wall := &steppedClock{Fake: mono}
	s := newSim(t, mono, wall)
	s.open(0)
	s.set(0, "u", Value{Pending: []Task{{Due: t0.Add(time.Hour).UnixNano(), ID: "t"}}})
	s.run(time.Minute)
	if got := s.take(); len(got) != 1 {
		t.Fatalf("ticks %v, want the first after the open only", got)
	}
	wall.step = 2 * time.Hour
	stepped := wall.Now()
	s.run(5 * time.Second)
	got := s.take()
	if len(got) != 1 || got[0].at.After(stepped.Add(s.p.cfg.Recheck)) {
		t.Fatalf("ticks %v after the step at %v, want one within the recheck", got, stepped)
	}
	if m := s.p.Index(0).Mark().Through; m.User != "u" {
		t.Fatalf("mark %v, want past the follow-up", m)
	}
}

// A new policy version ticks an idle partition once, within the recheck,
// for its tick to sweep the deferred follow-ups; once the mark records the
// version, no more ticks. A tick that does not record it is repeated at
// most once a recheck.
func TestPolicyChangeTicksAnIdlePartitionOnce(t *testing.T) {
	clk := clock.NewFake(t0)
	s := newSim(t, clk, clk)
	s.p.cfg.Version = func() string { return s.version }
	s.version = "v1"
	s.open(0)
	s.set(0, "u", Value{Pending: []Task{{Due: t0.Add(time.Hour).UnixNano(), ID: "t", Deferred: true}}})
	s.run(time.Minute)
	if got := s.take(); len(got) != 1 || s.p.Index(0).Mark().Swept != "v1" {
		t.Fatalf("ticks %v, swept %q: want the first after the open, sweeping v1", got, s.p.Index(0).Mark().Swept)
	}

	s.version = "v2"
	changed := clk.Now()
	s.run(time.Minute)
	got := s.take()
	if len(got) != 1 || got[0].at.After(changed.Add(s.p.cfg.Recheck)) {
		t.Fatalf("ticks %v after the change at %v, want one within the recheck", got, changed)
	}
	if sw := s.p.Index(0).Mark().Swept; sw != "v2" {
		t.Fatalf("swept %q, want v2", sw)
	}

	s.version, s.noRecord = "v3", true
	s.run(10 * time.Second)
	got = s.take()
	if len(got) < 9 || len(got) > 11 {
		t.Fatalf("%d ticks in 10s while the version is not recorded, want about one a second", len(got))
	}
	for i := 1; i < len(got); i++ {
		if d := got[i].at.Sub(got[i-1].at); d < s.p.cfg.Recheck {
			t.Fatalf("ticks %v apart, want at least the recheck", d)
		}
	}
}

// The first tick after an open goes out even with nothing pending, and is
// sent again when it goes unanswered for the tick timeout.
func TestLostFirstTickIsSentAgain(t *testing.T) {
	clk := clock.NewFake(t0)
	s := newSim(t, clk, clk)
	s.lose = 1
	s.open(0)
	s.run(time.Minute)
	got := s.take()
	if len(got) != 2 || !got[0].at.Equal(t0) || !got[1].at.Equal(t0.Add(s.p.cfg.TickTimeout)) {
		t.Fatalf("ticks %v, want at %v and again after the tick timeout", got, t0)
	}
}
