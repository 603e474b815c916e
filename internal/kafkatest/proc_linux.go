package kafkatest

import "syscall"

// sysProcAttr puts the broker in its own process group, so that it can be
// signalled as a whole and does not get the terminal's Ctrl-C, and has the
// kernel kill it if the test binary dies without stopping it (for example on
// a test timeout). Pdeathsig fires when the thread that started the child
// exits; the Go runtime only ends a thread when a goroutine exits while
// locked to it with runtime.LockOSThread, so do not start brokers from such
// goroutines.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
