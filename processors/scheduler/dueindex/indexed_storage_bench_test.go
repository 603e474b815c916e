package dueindex

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/internal/localstore"
)

// BenchmarkCallbackReadThenWrite is a callback's read of a user's value
// and its write of the next one through the due index's wrapper, over a
// local store (the firing path's store work, without Kafka). Values parse
// for free here: the wrapper's and the store's own work is measured.
func BenchmarkCallbackReadThenWrite(b *testing.B) {
	parsed := map[byte]*Value{
		'1': {Pending: []Task{{Due: t0.Add(time.Second).UnixNano(), ID: "t"}}},
		'2': {Pending: []Task{{Due: t0.Add(2 * time.Second).UnixNano(), ID: "t"}}},
	}
	parse := func(v []byte) (*Value, error) { return parsed[v[0]], nil }
	p, err := New(Config{Table: "tbl", Parse: parse, MarkKey: func(int32) string { return markKey }, Send: func(int32, Pos) error { return nil },
		Clock: clock.NewFake(t0), MinGap: 10 * time.Millisecond, Recheck: time.Second, TickTimeout: 3 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	stores := localstore.New(b.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	st, err := p.StorageBuilder(stores.Builder())("tbl", 0)
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Open(); err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	values := [2][]byte{[]byte("1"), []byte("2")}
	if err := st.Set("u", values[0]); err != nil { // restored
		b.Fatal(err)
	}
	if err := st.MarkRecovered(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := st.Get("u"); err != nil {
			b.Fatal(err)
		}
		i++
		if err := st.Set("u", values[i%2]); err != nil {
			b.Fatal(err)
		}
	}
}
