package ivrsched

import (
	"bufio"
	"strings"
	"testing"
	"time"

	"github.com/ivrsched/ivrsched/bench/harness"
)

// Lines as `ivrsched scheduler --log-level info` writes them (slog's text
// handler), a partition opened twice, one before the cut-off.
const schedulerLog = `time=2026-12-01T04:02:01.000Z level=INFO msg="local store recovered" topic=t-table partition=3 dir="/d/x y" records_restored=7 offset=9 took=50ms
time=2026-12-01T04:02:01.010Z level=INFO msg="due index built" role=scheduler table=t-table partition=3 keys=5 pending=4 took=1ms
time=2026-12-01T04:02:21.768Z level=INFO msg="local store recovered" topic=t-table partition=2 dir=/d records_restored=1200 offset=1300 took=1.5s
time=2026-12-01T04:02:21.770Z level=INFO msg="processor running" role=scheduler partitions=8
time=2026-12-01T04:02:21.779Z level=INFO msg="due index built" role=scheduler table=t-table partition=2 keys=609 pending=1320 took=11ms
time=2026-12-01T04:02:21.790Z level=INFO msg="due index built" role=scheduler table=t-table partition=3 keys=594 pending=1281 took=2.25s
`

func TestParseOpens(t *testing.T) {
	since := time.Date(2026, 12, 1, 4, 2, 10, 0, time.UTC)
	got, err := parseOpens(bufio.NewScanner(strings.NewReader(schedulerLog)), "main", since)
	if err != nil {
		t.Fatal(err)
	}
	want := []harness.PartitionOpen{
		{Instance: "main", Partition: 2, Restored: 1200, RestoreSec: 1.5, Keys: 609, Pending: 1320, BuildSec: 0.011},
		{Instance: "main", Partition: 3, Restored: -1, Keys: 594, Pending: 1281, BuildSec: 2.25}, // its store line is before since
	}
	if len(got) != len(want) {
		t.Fatalf("got %d opens, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		got[i].At = time.Time{}
		if got[i] != want[i] {
			t.Errorf("open %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}
