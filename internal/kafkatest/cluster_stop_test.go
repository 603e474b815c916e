package kafkatest

import (
	"errors"
	"fmt"
	"testing"
)

// A cluster's teardown forgives the kill of a node that outlived its
// quorum, and nothing else.
func TestQuorumLostExcusesOnlyTheLastKill(t *testing.T) {
	killed := fmt.Errorf("%w for 30s and was killed", errIgnoredSIGTERM)
	rm := errors.New("kafkatest: remove broker directory: busy")
	for _, c := range []struct {
		name       string
		errs       []error
		killedLeft int  // kills still reported
		rmLeft     bool // the directory error still reported
	}{
		{"two stopped, one killed", []error{nil, killed, nil}, 0, false},
		{"one stopped, two killed", []error{nil, killed, killed}, 2, false},
		{"the killed one's directory not removed", []error{nil, nil, errors.Join(killed, rm)}, 0, true},
		{"a single broker killed", []error{killed}, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := errors.Join(quorumLost(c.errs)...)
			n := 0
			for _, e := range quorumLost(c.errs) {
				if errors.Is(e, errIgnoredSIGTERM) {
					n++
				}
			}
			if n != c.killedLeft || errors.Is(err, rm) != c.rmLeft {
				t.Fatalf("kills reported %d (want %d), directory error reported %v (want %v): %v", n, c.killedLeft, errors.Is(err, rm), c.rmLeft, err)
			}
		})
	}
}
