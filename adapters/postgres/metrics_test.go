package postgres_test

import (
	"testing"

	"github.com/vantage-go/vantage/internal/metricstest"
	"github.com/vantage-go/vantage/ports"
)

// TestMetrics checks the engine's metrics on PostgreSQL against a known
// workload (see metricstest.Run), the listener's health included.
func TestMetrics(t *testing.T) {
	t.Parallel()

	metricstest.Run(t, func(t *testing.T) ports.Backend { return setup(t).backend }, metricstest.Features{Notifications: true})
}
