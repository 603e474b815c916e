package suppress

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/internal/policy"
)

const secret = "0123456789abcdef0123456789abcdef"

func TestLoadKey(t *testing.T) {
	env := func(v string) func(string) string { return func(string) string { return v } }
	if _, err := LoadKey("", env("")); !errors.Is(err, ErrNoKey) {
		t.Errorf("no key: %v, want ErrNoKey", err)
	}
	if _, err := LoadKey("", env("short")); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Errorf("short key: %v", err)
	}
	f := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(f, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := LoadKey(f, env("ignored-because-the-file-wins-ignored-ignored"))
	if err != nil || string(k) != secret {
		t.Errorf("from file: %q, %v", k, err)
	}
	if k, err := LoadKey("", env(secret)); err != nil || string(k) != secret {
		t.Errorf("from env: %q, %v", k, err)
	}
}

// The hash depends on the key, holds no digits of the number, and is the
// same for the number in E.164 form whoever asks.
func TestHash(t *testing.T) {
	a, b := Key(secret).Hash("+14155550123"), Key(secret+"x").Hash("+14155550123")
	if a == b || len(a) != 64 || strings.Contains(a, "4155550123") {
		t.Errorf("hashes %s %s", a, b)
	}
	if a != Key(secret).Hash("+14155550123") {
		t.Error("hash not deterministic")
	}
}

// A list's reused HMACs hash as a new one does, from any goroutine: a
// reused one not reset would hash the numbers before it too.
func TestListHashesLikeKey(t *testing.T) {
	l := &List{Hasher: Hasher{Key: Key(secret)}}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				n := fmt.Sprintf("+1415555%04d", g*1000+i%7)
				if got, want := l.Hash(n), l.Key.Hash(n); got != want {
					t.Errorf("number %s: list's hash %s, key's %s", n, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestCheck(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	k := Key(secret)
	store := map[string][]byte{}
	put := func(number string, e *pb.Suppression) {
		b, _ := proto.Marshal(e)
		store[k.Hash(number)] = b
	}
	pol, err := policy.Parse([]byte("campaigns:\n  urgent: {suppression_exempt: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	l := &List{Get: func(key string) ([]byte, error) { return store[key], nil }, Hasher: Hasher{Key: k}, Clock: clk, Policy: func() *policy.Policy { return pol }}
	put("+14155550123", &pb.Suppression{Reason: "opt-out", Until: timestamppb.New(clk.Now().Add(time.Hour))})
	store[k.Hash("+14155550124")] = []byte{0xff}
	if e, err := l.Check("+14155550123", "reminder"); err != nil || e.GetReason() != "opt-out" {
		t.Errorf("listed: %v, %v", e, err)
	}
	if e, _ := l.Check("+14155550123", "urgent"); e != nil {
		t.Error("an exempt campaign is suppressed")
	}
	if e, _ := l.Check("+14155550125", ""); e != nil {
		t.Error("an unlisted number is suppressed")
	}
	if e, _ := l.Check("+14155550124", ""); e == nil {
		t.Error("an entry that does not decode does not suppress")
	}
	clk.Advance(time.Hour)
	if e, _ := l.Check("+14155550123", ""); e != nil {
		t.Error("an entry past its until still suppresses")
	}
	l.Get = func(string) ([]byte, error) { return nil, errors.New("boom") }
	if _, err := l.Check("+14155550123", ""); err == nil {
		t.Error("a read error is not reported")
	}
	var none *List
	if e, err := none.Check("+14155550123", ""); e != nil || err != nil {
		t.Error("a nil list suppresses")
	}
}

func TestReason(t *testing.T) {
	long := strings.Repeat("é", MaxReasonBytes)
	r := Reason(&pb.Suppression{Reason: long})
	if len(r) > MaxReasonBytes || !strings.HasPrefix(long, r) || strings.ToValidUTF8(r, "?") != r {
		t.Errorf("cut reason %d bytes", len(r))
	}
}

// A call's detail names the entry's reason, and the reason comes back out
// of it; a detail of another kind of call is not taken for one, and a long
// reason comes back cut like Reason.
func TestDetailRoundTrip(t *testing.T) {
	for _, reason := range []string{"opted out by keypress (call c1)", "", "suppressed: twice"} {
		d := Detail(&pb.Suppression{Reason: reason})
		if !strings.HasPrefix(d, DetailPrefix) {
			t.Errorf("Detail(%q) = %q, want the prefix %q", reason, d, DetailPrefix)
		}
		if got, ok := DetailReason(d); !ok || got != reason {
			t.Errorf("DetailReason(Detail(%q)) = %q, %v", reason, got, ok)
		}
	}
	if got, ok := DetailReason("busy (after 1 requests)"); ok {
		t.Errorf("a detail without the prefix read as suppressed: %q", got)
	}
	long := strings.Repeat("é", MaxReasonBytes)
	if got, ok := DetailReason(DetailPrefix + long); !ok || got != Reason(&pb.Suppression{Reason: long}) || len(got) > MaxReasonBytes {
		t.Errorf("long reason: %d bytes, %v", len(got), ok)
	}
}
