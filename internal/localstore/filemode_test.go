package localstore

import (
	"os"
	"path/filepath"
	"testing"
)

// A store's directory is its user's alone, whatever the process's umask:
// a new one is made 0700, and one an older version made 0755 is closed
// at the next Open, so the LevelDB files beneath (0644: goleveldb's fixed
// mode) are out of other users' reach.
func TestStoreDirectoryIsPrivate(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "old.0")
	if err := os.MkdirAll(old, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(old, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	f := newFixture(t, dir, nil)
	for _, topic := range []string{"new", "old"} {
		st := f.open(t, topic, 0)
		info, err := os.Stat(filepath.Join(dir, topic+".0"))
		if err != nil {
			t.Fatal(err)
		}
		if perm := info.Mode().Perm(); perm != 0o700 {
			t.Errorf("%s store's directory is %v after Open, want 0700", topic, perm)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
