package dueindex

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lovoo/goka/storage"
)

// Backlog counts the follow-ups after the mark, those due now (parked ones
// too) and the earliest due time among them; fired ones leave it.
func TestBacklog(t *testing.T) {
	x := NewIndex(nil)
	for i, d := range []time.Duration{-3 * time.Second, -time.Second, 0, time.Second, time.Hour} {
		x.Update(string(rune('a'+i)), nil, &Value{Pending: []Task{{Due: t0.Add(d).UnixNano(), ID: "t"}}})
	}
	expect(t, x.Backlog(t0), Backlog{Pending: 5, Due: 3, OldestDue: t0.Add(-3 * time.Second)})
	due := x.TakeDue(t0, 2) // a (-3s) and b (-1s)
	x.Park(due[0])          // a waits for its user's callback: still pending, still due
	x.PutBack(due[1])
	expect(t, x.Backlog(t0), Backlog{Pending: 5, Due: 3, OldestDue: t0.Add(-3 * time.Second)})
	x.Update("a", &Value{Pending: []Task{{Due: due[0].Due, ID: "t"}}}, nil)                             // its user's write releases it
	x.Update(markKey, nil, &Value{Mark: &Mark{Through: Pos{Due: t0.UnixNano(), User: "c", Task: "t"}}}) // b and c fired
	expect(t, x.Backlog(t0.Add(2*time.Second)), Backlog{Pending: 2, Due: 1, OldestDue: t0.Add(time.Second)})
	expect(t, x.Backlog(t0.Add(-time.Minute)), Backlog{Pending: 2})
}

// Held follow-ups (timers the mark does not cover) count as pending, and
// leave the count when they are woken or rewritten; retention timers are not
// follow-ups and never count.
func TestBacklogCountsHeld(t *testing.T) {
	x := NewIndex(nil)
	x.SetRetention(time.Hour)
	x.Update(markKey, nil, &Value{Mark: &Mark{Through: Pos{Due: t0.UnixNano(), User: "z", Task: "t"}}})
	h1 := &Value{Pending: []Task{{Due: t0.Add(-time.Second).UnixNano(), ID: "h", Held: true}}, LastActive: t0.UnixNano()}
	h2 := &Value{Pending: []Task{{Due: t0.Add(time.Second).UnixNano(), ID: "h", Held: true}}, LastActive: t0.UnixNano()}
	x.Update("a", nil, h1)
	x.Update("b", nil, h2)
	x.Update("idle", nil, &Value{LastActive: t0.UnixNano()}) // a retention timer only
	x.Update("p", nil, &Value{Pending: []Task{{Due: t0.Add(time.Minute).UnixNano(), ID: "t"}}})
	expect(t, x.Backlog(t0), Backlog{Pending: 3, Held: 2})
	if n := len(x.Timers()); n != 3 {
		t.Fatalf("%d timers, want 3 (two held, one retention)", n)
	}
	x.Update("a", h1, h1) // rewritten as it was: still one held follow-up
	expect(t, x.Backlog(t0), Backlog{Pending: 3, Held: 2})
	if woken := x.TakeTimers(t0, 0); len(woken) != 1 || woken[0].User != "a" {
		t.Fatalf("woken %v, want a's held follow-up", woken)
	}
	expect(t, x.Backlog(t0), Backlog{Pending: 2, Held: 1})
	x.Update("b", h2, &Value{LastActive: t0.UnixNano()}) // fired by its wake: b is idle now
	expect(t, x.Backlog(t0), Backlog{Pending: 1})
}

func expect(t *testing.T, got, want Backlog) {
	t.Helper()
	if got.Pending != want.Pending || got.Held != want.Held || got.Due != want.Due || !got.OldestDue.Equal(want.OldestDue) {
		t.Fatalf("backlog %+v, want %+v", got, want)
	}
}

// Building the index of a large partition logs its progress.
func TestIndexBuildLogsProgress(t *testing.T) {
	defer func(d time.Duration) { buildProgressEvery = d }(buildProgressEvery)
	buildProgressEvery = 0 // log at every check: every buildCheckEvery keys
	var logs strings.Builder
	p, err := New(Config{Table: "tbl", Parse: parse, MarkKey: func(int32) string { return markKey },
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	open(t, p, "tbl", 0, storage.NewMemory(), func(st storage.Storage) {
		for i := range 2*buildCheckEvery + 10 {
			if err := st.Set(fmt.Sprint("user-", i), enc(t0)); err != nil {
				t.Fatal(err)
			}
		}
	})
	for _, want := range []string{"msg=\"building due index\" table=tbl partition=0 keys=4096 pending=4096",
		"msg=\"building due index\" table=tbl partition=0 keys=8192 pending=8192", "msg=\"due index built\""} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no %q in the log:\n%s", want, logs.String())
		}
	}
}
