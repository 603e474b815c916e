package main

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"
)

// Without --demo-file, --demo feeds the built-in copy of
// testdata/demo-onboarding.jsonl, from any working directory.
func TestDemoBuiltInFromAnyDirectory(t *testing.T) {
	want, err := readDemo(filepath.Join("..", "..", "testdata", "demo-onboarding.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	got, err := readDemo("")
	if err != nil {
		t.Fatal(err)
	}
	if len(want) == 0 || len(got) != len(want) {
		t.Fatalf("built-in sample has %d commands, testdata's file %d", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("command %d: built in %v, file %v", i, got[i], want[i])
		}
	}
	if _, err := os.Stat("testdata"); err == nil {
		t.Fatal("the test should run away from the repository")
	}
}
