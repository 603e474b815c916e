//go:build unix

package main

import "syscall"

// privateUmask makes the files and directories this process creates
// from now on its user's alone (umask 077), and returns what restores the
// previous mask. The roles' state holds phone numbers, and the libraries
// that write it choose fixed modes (goleveldb 0644 files; kfake 0644 files
// and 0755 directories): the umask is the one setting that reaches them.
// It is process-wide, so only the commands that run roles set it, and
// they create no files but their state.
func privateUmask() (restore func()) {
	old := syscall.Umask(0o077)
	return func() { syscall.Umask(old) }
}
