package local

import "syscall"

// procAttr makes a child die with the operator (the kernel sends SIGKILL when the operator's
// thread that started it exits) and puts it in its own process group, so that a Ctrl-C meant for
// the operator does not hit it before the operator stops it in order.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
