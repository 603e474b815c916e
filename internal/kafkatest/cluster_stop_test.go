package kafkatest

import (
	"errors"
	"testing"
)

// A cluster's teardown forgives the kill of a node that outlived its
// quorum, and nothing else.
func TestQuorumLostExcusesOnlyTheLastKill(t *testing.T) {
	rm := errors.New("kafkatest: remove broker directory: busy")
	for _, c := range []struct {
		name       string
		killed     []bool
		errs       []error
		killedLeft int  // kills still reported
		rmLeft     bool // the directory error still reported
	}{
		{"two stopped, one killed", []bool{false, true, false}, []error{nil, nil, nil}, 0, false},
		{"one stopped, two killed", []bool{false, true, true}, []error{nil, nil, nil}, 2, false},
		{"the killed one's directory not removed", []bool{false, false, true}, []error{nil, nil, rm}, 0, true},
		{"a single broker killed", []bool{true}, []error{nil}, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := errors.Join(stopErrors(c.killed, c.errs)...)
			n := 0
			for _, e := range stopErrors(c.killed, c.errs) {
				if errors.Is(e, errKilled) {
					n++
				}
			}
			if n != c.killedLeft || errors.Is(err, rm) != c.rmLeft {
				t.Fatalf("kills reported %d (want %d), directory error reported %v (want %v): %v", n, c.killedLeft, errors.Is(err, rm), c.rmLeft, err)
			}
		})
	}
}
