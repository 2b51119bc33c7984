//go:build unix

// Package proccpu reads the CPU time the process has used, for the
// benchmarks' CPU figures.
package proccpu

import (
	"syscall"
	"time"
)

// Used returns the CPU time the process has used, user and system, or 0
// when it cannot be read.
func Used() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
