//go:build unix && !linux

package kafkatest

import "syscall"

// sysProcAttr puts the broker in its own process group, so that it can be
// signalled as a whole and does not get the terminal's Ctrl-C.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
