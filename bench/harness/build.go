package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

const moduleLine = "module github.com/ivrsched/ivrsched/bench\n"

// ModuleDir is the bench module's directory: found from this source file's
// path (a test or a binary built from this checkout), else upwards from the
// working directory. The subjects build their binaries there.
func ModuleDir() (string, error) {
	isBench := func(dir string) bool {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		return err == nil && strings.HasPrefix(string(b), moduleLine)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		if dir := filepath.Join(filepath.Dir(file), ".."); isBench(dir) {
			return filepath.Clean(dir), nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		for _, d := range []string{dir, filepath.Join(dir, "bench")} {
			if isBench(d) {
				return d, nil
			}
		}
		if filepath.Dir(dir) == dir {
			return "", errors.New("bench module not found: run from the ivrsched repository")
		}
	}
}

// GoBuild runs `go build -o out pkg` in dir, with env added to the
// environment, and returns the build's output in the error.
func GoBuild(ctx context.Context, dir, out, pkg string, env ...string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s in %s: %w\n%s", pkg, dir, err, b)
	}
	return nil
}
