package faults

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill the worker when the suite dies, so
// an interrupted suite leaves no worker behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
