//go:build !linux

package local

import "syscall"

// procAttr puts a child in its own process group. Outside Linux there is no parent-death signal:
// the children of a killed operator keep running until the next start adopts their folders (their
// ports are then taken, so new ones are allocated).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
