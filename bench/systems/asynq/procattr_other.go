//go:build !linux

package asynq

import "syscall"

func childAttr() *syscall.SysProcAttr { return nil }
