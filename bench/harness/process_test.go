package harness

import (
	"bufio"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestProcessLogKillAndStop(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "p.log")
	p, err := StartProcess(exec.Command("sh", "-c", "echo out; echo err >&2"), log)
	if err != nil {
		t.Fatal(err)
	}
	<-p.Exited()
	if got := Tail(log, 100); got != "out\nerr\n" || p.Err() != nil {
		t.Fatalf("log %q, err %v", got, p.Err())
	}

	p, err = StartProcess(exec.Command("sleep", "30"), "")
	if err != nil {
		t.Fatal(err)
	}
	if p.Err() != nil || len(PIDs(nil, p)) != 1 {
		t.Fatal("a running process has an exit error or no pid")
	}
	if err := p.Kill(); err != nil || p.Err() == nil || !strings.Contains(p.Err().Error(), "killed") {
		t.Fatalf("kill: %v, exit %v", err, p.Err())
	}

	p, err = StartProcess(exec.Command("sleep", "30"), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatalf("stop of a process that ends on SIGTERM: %v", err)
	}

	// One that ignores SIGTERM is killed after the timeout, and Stop says so.
	cmd := exec.Command("sh", "-c", `trap "" TERM; echo ready; while :; do sleep 0.05; done`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if p, err = StartProcess(cmd, log); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" { // the trap is set
		t.Fatalf("read %q: %v", line, err)
	}
	if err := p.Stop(200 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("stop: %v, want a kill after the timeout", err)
	}
}
