package dueindex

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// The collector skips memory without pointers: the B-tree's items must not
// grow one.
func TestItemHoldsNoPointers(t *testing.T) {
	typ := reflect.TypeFor[item]()
	for i := range typ.NumField() {
		switch k := typ.Field(i).Type.Kind(); k {
		case reflect.Int64, reflect.Uint32, reflect.Uint16:
		default:
			t.Errorf("item.%s is a %v: items must hold no pointers", typ.Field(i).Name, k)
		}
	}
}

func randID(rng *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + rng.IntN(26))
	}
	return string(b)
}

func TestKeysKeepIDsAndReuseSlots(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var k keys
	type kept struct {
		it         item
		user, task string
	}
	var live []kept
	lengths := []int{0, 1, 7, 16, 17, 100, 3000, 4096, 5000, 70000}
	put := func(n int) {
		for range n {
			u := randID(rng, lengths[rng.IntN(len(lengths))])
			tk := randID(rng, lengths[rng.IntN(len(lengths)-1)]) // task ids up to 5000
			live = append(live, kept{k.put(int64(len(live)), u, tk), u, tk})
		}
	}
	check := func() {
		t.Helper()
		for _, e := range live {
			u, tk := k.ids(e.it)
			if u != e.user || tk != e.task {
				t.Fatalf("ids of %+v: got %d and %d bytes, want %d and %d", e.it, len(u), len(tk), len(e.user), len(e.task))
			}
			if p := k.pos(e.it); p.User != e.user || p.Task != e.task || p.Due != e.it.due {
				t.Fatalf("pos of %+v: got %v", e.it, p)
			}
		}
	}
	put(2000)
	check()
	slabs := func() (n int) {
		for _, c := range k.classes {
			n += len(c.slabs)
		}
		return n
	}
	before, bigBefore := slabs(), len(k.big)
	if bigBefore == 0 {
		t.Fatal("no id pair was kept apart as strings")
	}
	// Free half, put as many again: freed slots are reused, so the slabs
	// grow by little.
	rng.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
	for _, e := range live[1000:] {
		k.free(e.it)
	}
	live = live[:1000]
	put(1000)
	check()
	if after := slabs(); after > before+before/4 {
		t.Errorf("slabs grew from %d to %d after freeing half and putting as many back", before, after)
	}
	if len(k.big) > bigBefore+bigBefore/2 {
		t.Errorf("ids kept apart grew from %d to %d", bigBefore, len(k.big))
	}
}

// The index orders ids of every length (in slots of every size and kept
// apart) like Pos.Less.
func TestIndexOrdersIDsOfEveryLength(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	x := NewIndex(nil)
	var want []Pos
	for i := range 500 {
		u := strings.Repeat("u", []int{1, 20, 300, 70000}[i%4]) + randID(rng, 2)
		tk := randID(rng, []int{0, 3, 50, 2000}[rng.IntN(4)])
		due := t0.Add(time.Duration(rng.IntN(5)) * time.Second).UnixNano() // many ties on the due time
		x.Update(u, nil, &Value{Pending: []Task{{Due: due, ID: tk}}})
		want = append(want, Pos{due, u, tk})
	}
	slices.SortFunc(want, Compare)
	want = slices.Compact(want)
	if got := x.Pending(); !slices.Equal(got, want) {
		t.Fatalf("pending out of order or lost: %d of %d", len(got), len(want))
	}
	// Remove a third through Update, take the rest in order.
	var left []Pos
	for i, p := range want {
		if i%3 == 0 {
			x.Update(p.User, &Value{Pending: []Task{{Due: p.Due, ID: p.Task}}}, nil)
			continue
		}
		left = append(left, p)
	}
	if got := x.TakeDue(t0.Add(time.Minute), 0); !slices.Equal(got, left) {
		t.Fatalf("took %d, want %d in order", len(got), len(left))
	}
	if x.Len() != 0 {
		t.Fatalf("%d left after taking everything", x.Len())
	}
}
