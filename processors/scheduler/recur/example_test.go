package recur_test

import (
	"fmt"
	"time"

	"github.com/ivrsched/ivrsched/processors/scheduler/recur"
)

// A weekly call at Monday 10:00 in New York keeps 10:00 across the DST
// change of 8 March 2026.
func ExampleRecurrence_Next() {
	ny, _ := time.LoadLocation("America/New_York")
	r, err := recur.New("", "0 10 * * mon", 0, time.Time{})
	if err != nil {
		panic(err)
	}
	first := time.Date(2026, 3, 2, 10, 0, 0, 0, ny)
	prev := first
	for n := 1; n <= 2; n++ {
		next, ok := r.Next(first, prev, n, ny)
		fmt.Println(next.In(ny).Format(time.RFC3339), next.UTC().Format("15:04Z"), ok)
		prev = next
	}
	// Output:
	// 2026-03-09T10:00:00-04:00 14:00Z true
	// 2026-03-16T10:00:00-04:00 14:00Z true
}
