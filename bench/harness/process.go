package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Process is a child process of a system under test (a scheduler, a worker,
// redis-server): started in its own process group, killed by the kernel if
// the harness dies first (on Linux), and waited for in the background.
type Process struct {
	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{}
	err    error // what Wait returned; read after exited
}

// StartProcess starts cmd. If logPath is not empty, the process's stdout
// and stderr (those cmd leaves nil) are appended to that file.
func StartProcess(cmd *exec.Cmd, logPath string) (*Process, error) {
	p := &Process{cmd: cmd, exited: make(chan struct{})}
	if logPath != "" {
		f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("log of %s: %w", cmd.Path, err)
		}
		p.log = f
		if cmd.Stdout == nil {
			cmd.Stdout = f
		}
		if cmd.Stderr == nil {
			cmd.Stderr = f
		}
	}
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		p.closeLog()
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	go func() {
		p.err = cmd.Wait()
		p.closeLog()
		close(p.exited)
	}()
	return p, nil
}

func (p *Process) closeLog() {
	if p.log != nil {
		p.log.Close()
	}
}

// PIDs lists the process ids of the processes that are not nil.
func PIDs(ps ...*Process) []int {
	var out []int
	for _, p := range ps {
		if p != nil {
			out = append(out, p.PID())
		}
	}
	return out
}

// PID is the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited is closed once the process has exited and been waited for.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err is how the process ended (what exec.Cmd.Wait returned); nil while it
// runs.
func (p *Process) Err() error {
	select {
	case <-p.exited:
		return p.err
	default:
		return nil
	}
}

// Kill kills the process with SIGKILL, as kill -9 does, and waits for it.
func (p *Process) Kill() error {
	err := p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	if errors.Is(err, os.ErrProcessDone) {
		err = nil
	}
	return err
}

// Stop sends SIGTERM and waits; after timeout it kills the process and
// says so.
func (p *Process) Stop(timeout time.Duration) error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("SIGTERM pid %d: %w", p.PID(), err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(timeout):
	}
	if err := p.Kill(); err != nil {
		return fmt.Errorf("SIGKILL pid %d: %w", p.PID(), err)
	}
	return fmt.Errorf("%s (pid %d) did not stop within %s of SIGTERM; killed", p.cmd.Path, p.PID(), timeout)
}

// Tail returns the last n bytes of a log file, for error messages.
func Tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	off := max(fi.Size()-n, 0)
	buf := make([]byte, fi.Size()-off)
	_, _ = f.ReadAt(buf, off)
	return string(buf)
}
