package asynq

import "syscall"

// childAttr makes a child die with the harness (no orphaned redis-server or
// worker after the harness is killed).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
