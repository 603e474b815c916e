//go:build !unix

package main

// privateUmask does nothing where there is no umask; the 0700 data
// directories keep the state private there.
func privateUmask() (restore func()) { return func() {} }
