package suppress

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// hashOf is a record key as Key.Hash makes it: 64 lowercase hex digits.
func hashOf(i int) string {
	var b [32]byte
	binary.BigEndian.PutUint64(b[8:], uint64(i)*0x9e3779b97f4a7c15)
	binary.BigEndian.PutUint64(b[24:], uint64(i))
	return hex.EncodeToString(b[:])
}

// A hash and any other key a producer wrote (the same digits in upper
// case, a short one) are distinct entries; a value stored is returned as
// it was, also when empty; none is nil.
func TestStorageKeepsEveryKeyApart(t *testing.T) {
	s := NewStorage()
	h := hashOf(1)
	keys := map[string]string{h: "hash", strings.ToUpper(h): "upper", "short": "other", hashOf(2): ""}
	for k, v := range keys {
		if err := s.Set(k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range keys {
		got, err := s.Get(k)
		if err != nil || got == nil || string(got) != v {
			t.Errorf("Get(%q) = %q, %v; want %q (not nil)", k, got, err, v)
		}
		if has, _ := s.Has(k); !has {
			t.Errorf("Has(%q) = false", k)
		}
	}
	if got := Len(s); got != len(keys) {
		t.Errorf("Len = %d, want %d", got, len(keys))
	}
	if got, _ := s.Get(hashOf(3)); got != nil {
		t.Errorf("Get of a key never set = %q, want nil", got)
	}
	if err := s.Set(hashOf(3), nil); err == nil {
		t.Error("Set of a nil value: no error")
	}
	for _, k := range []string{h, "short"} {
		if err := s.Delete(k); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Get(k); got != nil {
			t.Errorf("Get(%q) after Delete = %q", k, got)
		}
	}
	if got := Len(s); got != len(keys)-2 {
		t.Errorf("Len after two Deletes = %d, want %d", got, len(keys)-2)
	}
	if got, _ := s.Get(strings.ToUpper(h)); string(got) != "upper" {
		t.Errorf("the upper-case key after the hash's Delete: %q", got)
	}
	if off, _ := s.GetOffset(-2); off != -2 {
		t.Errorf("GetOffset before SetOffset = %d, want the default", off)
	}
	_ = s.SetOffset(41)
	if off, _ := s.GetOffset(-2); off != 41 {
		t.Errorf("GetOffset = %d, want 41", off)
	}
}

// Set keeps a copy: Goka hands it a slice of the fetch response, which
// must not stay in memory with the entry (nor change it when reused).
func TestStorageCopiesValues(t *testing.T) {
	s := NewStorage()
	buf := []byte("value")
	_ = s.Set(hashOf(1), buf)
	copy(buf, "XXXXX")
	if got, _ := s.Get(hashOf(1)); string(got) != "value" {
		t.Errorf("Get after the caller changed its slice = %q, want %q", got, "value")
	}
	got, _ := s.Get(hashOf(1))
	copy(got, "YYYYY")
	if again, _ := s.Get(hashOf(1)); string(again) != "value" {
		t.Errorf("Get after a reader changed what it got = %q", again)
	}
}

// The iterator goes over every key in order, hashes and others together;
// Seek and a range start at the first key at or after theirs.
func TestStorageIteratesInKeyOrder(t *testing.T) {
	s := NewStorage()
	want := []string{hashOf(5), hashOf(1), "zz", "00", strings.ToUpper(hashOf(2)), hashOf(7)}
	for _, k := range want {
		_ = s.Set(k, []byte("v"+k))
	}
	_ = s.SetOffset(9)
	slices.Sort(want)
	it, _ := s.Iterator()
	var got []string
	for it.Next() {
		v, _ := it.Value()
		if string(v) != "v"+string(it.Key()) {
			t.Errorf("value of %s = %q", it.Key(), v)
		}
		got = append(got, string(it.Key()))
	}
	if !slices.Equal(got, want) {
		t.Errorf("iterated %v, want %v", got, want)
	}
	it, _ = s.Iterator()
	if !it.Seek([]byte(want[2])) || string(it.Key()) != want[2] {
		t.Errorf("Seek(%s) at %q", want[2], it.Key())
	}
	if !it.Seek([]byte(want[2]+"\x00")) || string(it.Key()) != want[3] {
		t.Errorf("Seek past %s at %q, want %q", want[2], it.Key(), want[3])
	}
	it, _ = s.IteratorWithRange([]byte(want[1]), []byte(want[4]))
	got = got[:0]
	for it.Next() {
		got = append(got, string(it.Key()))
	}
	if !slices.Equal(got, want[1:4]) {
		t.Errorf("range iterated %v, want %v", got, want[1:4])
	}
}

// A restore of n entries takes time linear in n. Goka's memory storage
// sorts every key at each new one: 100,000 entries in one partition took
// it minutes.
func TestStorageSetsManyEntriesQuickly(t *testing.T) {
	const n = 100_000
	s := NewStorage()
	value := bytes.Repeat([]byte{'v'}, 40)
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < n; i++ {
		if err := s.Set(hashOf(i), value); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 0 && time.Now().After(deadline) {
			t.Fatalf("only %d of %d entries stored within 10 s", i, n)
		}
	}
	if got, _ := s.Get(hashOf(n - 1)); !bytes.Equal(got, value) {
		t.Fatalf("last entry = %q", got)
	}
}

// An entry of the list as the roles hold it (a 64-digit hash, a value of
// 40 bytes) takes less than 160 bytes of heap; Goka's memory storage took
// about 190 (the key as a string in a map and in a sorted slice, and the
// fetch response the value came in).
func TestStorageEntryHeap(t *testing.T) {
	const n = 200_000
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	response := bytes.Repeat([]byte{'v'}, 40*n) // the values arrive as slices of it
	s := NewStorage()
	for i := 0; i < n; i++ { // each key a string of its own, as Goka makes them
		_ = s.Set(hashOf(i), response[40*i:40*(i+1)])
	}
	response = nil
	runtime.GC()
	runtime.ReadMemStats(&after)
	perEntry := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
	t.Logf("%d B of heap per entry", perEntry)
	if perEntry >= 160 {
		t.Errorf("%d B of heap per entry, want < 160", perEntry)
	}
	runtime.KeepAlive(s)
}
