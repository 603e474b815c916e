package app

import (
	"os"
	"path/filepath"
	"testing"
)

// The embedded broker's directory holds its partitions, phone numbers
// included: it is made 0700, and one an older version made 0755 is closed
// at the next start, whatever the process's umask (kfake's own files and
// directories are 0644 and 0755).
func TestEmbeddedDataDirIsPrivate(t *testing.T) {
	for _, existing := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "broker")
		if existing {
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o755); err != nil { // whatever the umask
				t.Fatal(err)
			}
		}
		b, err := StartEmbedded("127.0.0.1:0", dir)
		if err != nil {
			t.Fatal(err)
		}
		b.Close()
		info, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if perm := info.Mode().Perm(); perm != 0o700 {
			t.Errorf("existing %v: the broker's directory is %v, want 0700", existing, perm)
		}
	}
}
