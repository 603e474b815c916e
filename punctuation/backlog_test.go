package punctuation

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

func expect(t *testing.T, got, want Backlog) {
	t.Helper()
	if got.Pending != want.Pending || got.Due != want.Due || !got.OldestDue.Equal(want.OldestDue) {
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
