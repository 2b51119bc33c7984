package core

import (
	"testing"
	"time"
)

// recv returns the next value of ch, failing the test if none comes within
// ten seconds.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
