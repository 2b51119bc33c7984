package postgres

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPublisherStartsNothingAfterWait checks that a wake arriving after the
// Store began closing (an append that passed its readiness check just
// before Close) starts no notification: wait has returned, and a goroutine
// started now would outlive Close and race with it.
func TestPublisherStartsNothingAfterWait(t *testing.T) {
	var p publisher
	p.wait()
	p.wake()
	p.mu.Lock()
	defer p.mu.Unlock()
	require.False(t, p.running, "a notification started after wait")
}
