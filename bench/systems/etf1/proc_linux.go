package etf1

import "syscall"

// sysProcAttr puts etf1 in its own process group (no terminal Ctrl-C) and
// has the kernel kill it if the harness dies without stopping it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
