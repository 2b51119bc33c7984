package vantagetest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that every harness stops all it started.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
