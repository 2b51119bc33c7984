//go:build unix

package faults

import (
	"os"
	"syscall"
)

// freezeSignal and thawSignal pause a process and let it run on (kill
// -STOP, kill -CONT): what a long garbage collection, a suspended virtual
// machine or a debugger does to a process, which neither exits nor runs.
var freezeSignal, thawSignal os.Signal = syscall.SIGSTOP, syscall.SIGCONT
