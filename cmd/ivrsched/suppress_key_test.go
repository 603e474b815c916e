package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// On the embedded broker without a key, `run` keeps one in its data
// directory: a restart finds the same key, so the numbers on the list stay
// on it, and `ivrsched suppress` can be pointed at the file.
func TestEmbeddedSuppressionKeyOutlivesTheProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", embeddedKeyFile)
	first, err := embeddedSuppressionKey(path)
	if err != nil {
		t.Fatal(err)
	}
	again, err := embeddedSuppressionKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, again) {
		t.Fatalf("the key changed across starts: %q then %q", first, again)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	other, err := embeddedSuppressionKey(filepath.Join(t.TempDir(), embeddedKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(first, other) {
		t.Fatal("two data directories made the same key")
	}
}

// A key file that is there but too short is an error, not replaced.
func TestEmbeddedSuppressionKeyShortFileIsAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), embeddedKeyFile)
	if err := os.WriteFile(path, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := embeddedSuppressionKey(path); err == nil {
		t.Fatal("a 5-byte key file was accepted")
	}
	if b, _ := os.ReadFile(path); string(b) != "short" {
		t.Fatalf("the key file was rewritten: %q", b)
	}
}
