package main

import (
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Phone numbers rest in the stores' LevelDB files and in the embedded
// broker's partitions: after a run, no directory or file under the data
// directory is open to the group or to others (0700 and 0600), though
// goleveldb and kfake create their files with fixed 0644 modes.
func TestDataAtRestIsPrivate(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	r := startRun(t, "--data-dir", data)
	r.cli("onboard", "--user", "private", "--phone", "+14155550177", "--task", "t1", "--delay", "10h")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) { // no event to await
		var out strings.Builder
		if code := realMain(r.ctx, []string{"show", "--user", "private", "--brokers", r.broker}, &out, io.Discard); code == 0 && strings.Contains(out.String(), `"t1"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the onboarding is not applied")
		}
	}
	r.stop()
	seen := map[string]bool{} // what the walk must have found
	var open []string         // entries the group or others may use
	err := filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(data, path)
		if perm := info.Mode().Perm(); perm&0o077 != 0 {
			open = append(open, rel+" "+perm.String())
		}
		switch top, _, _ := strings.Cut(rel, string(filepath.Separator)); {
		case !d.IsDir() && (strings.HasSuffix(path, ".log") || strings.HasSuffix(path, ".ldb")):
			seen[top+" LevelDB"] = true
		case !d.IsDir() && top == "broker":
			seen["broker file"] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(open) > 0 {
		t.Errorf("%d entries under the data directory are open to the group or others, want 0700 directories and 0600 files: %s",
			len(open), strings.Join(open[:min(len(open), 8)], ", "))
	}
	for _, want := range []string{"scheduler LevelDB", "dialer LevelDB", "broker file"} {
		if !seen[want] {
			t.Errorf("no %s under the data directory (found %v): the test looks in the wrong place", want, seen)
		}
	}
}
