package harness

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// The idle summary takes the floor's broker CPU of the same repetition
// away from each system's, and leaves failed runs out.
func TestSummarizeIdleAgainstTheFloorOfTheSameRepetition(t *testing.T) {
	rs := []IdleResult{
		{System: "kafka-floor", Repetition: 1, Floor: true, BrokerCPUPct: 3},
		{System: "sys", Repetition: 1, SystemCPUPct: 10, BrokerCPUPct: 20, SystemWritesPerSec: 900},
		{System: "kafka-floor", Repetition: 2, Floor: true, BrokerCPUPct: 5},
		{System: "sys", Repetition: 2, SystemCPUPct: 12, BrokerCPUPct: 6, SystemWritesPerSec: 1100},
		{System: "sys", Repetition: 3, SystemCPUPct: 99, BrokerCPUPct: 99, Error: "start: boom"},
	}
	ss := SummarizeIdle(rs, []string{"kafka-floor", "sys"})
	if len(ss) != 2 {
		t.Fatalf("%d summaries, want 2: %+v", len(ss), ss)
	}
	s := ss[1]
	if s.OverFloor.Min != 1 || s.OverFloor.Max != 17 || s.OverFloor.N != 2 {
		t.Errorf("over the floor %+v, want 1 to 17 over 2 runs", s.OverFloor)
	}
	if s.SystemCPU.Max != 12 || s.Writes.Min != 900 {
		t.Errorf("system CPU %+v, writes %+v: the failed run counted", s.SystemCPU, s.Writes)
	}
	var b bytes.Buffer
	IdleMarkdown(&b, rs, []string{"kafka-floor", "sys"})
	if !strings.Contains(b.String(), "| sys | 11.0 (10.0–12.0) |") || !strings.Contains(b.String(), "start: boom") {
		t.Errorf("markdown:\n%s", b.String())
	}
}

// WriteCalls reads this process's write system calls.
func TestWriteCallsCountsThisProcesssWrites(t *testing.T) {
	before := WriteCalls(os.Getpid())
	f, err := os.Create(t.TempDir() + "/w")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for range 10 {
		if _, err := f.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if got := WriteCalls(os.Getpid()) - before; got < 10 {
		t.Errorf("%d write calls counted, want at least 10", got)
	}
}
