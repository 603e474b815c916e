package harness

import "syscall"

// childAttr puts a child in its own process group (a Ctrl-C of the harness
// does not reach it; the harness stops it) and has the kernel kill it if the
// harness dies without stopping it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
