package main

import (
	"strings"
	"testing"
)

// A system listed twice would read its first run's fires (same topics, same
// ids) in its second: refused.
func TestChooseRefusesASystemTwice(t *testing.T) {
	_, err := choose("ivrsched-kafka,kafka-floor, ivrsched-kafka")
	if err == nil || !strings.Contains(err.Error(), `"ivrsched-kafka" is listed twice`) {
		t.Fatalf("err %v", err)
	}
	es, err := choose("kafka-floor,ivrsched-kafka")
	if err != nil || len(es) != 2 || es[0].name != "kafka-floor" {
		t.Fatalf("choose: %v %v", es, err)
	}
}

// Each repetition's systems have names (and so topics) of their own.
func TestRunNamesDifferPerRepetition(t *testing.T) {
	for _, e := range registry {
		if got := e.make(e.name + "-r2").Name(); got != e.name+"-r2" {
			t.Errorf("%s: made %q", e.name, got)
		}
	}
}
