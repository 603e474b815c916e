//go:build !linux

package harness

import "syscall"

// childAttr puts a child in its own process group (a Ctrl-C of the harness
// does not reach it; the harness stops it).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
