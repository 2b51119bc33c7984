//go:build !linux

package faults

import "os/exec"

// dieWithParent has no portable equivalent off Linux: the suite's cleanup
// kills its workers, but a suite killed with SIGKILL leaves them running.
func dieWithParent(*exec.Cmd) {}
