package pair

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/queue"
	"github.com/vantage-go/vantage/internal/clocktest"
)

// Rows fetched before a failure of their pair was acknowledged are stale:
// the backend released the failed row since, so they are not applied again
// (which would repeat the failure without counting an attempt).
func TestStaleFetchAfterFailureAck(t *testing.T) {
	t.Parallel()

	clock := clocktest.NewFake()
	p := NewParking(&base.Env{Clock: clock}, Config{BatchSize: 1}, queue.New(queue.Hooks{}))
	k := Key{Stream: uuid.New(), Perspective: "c"}
	before := p.NextFetch()
	p.park(k, clock.Now())
	p.ParkAcked(k)
	require.True(t, p.StaleFetch(k, before), "fetched before the acknowledgement")
	after := p.NextFetch()
	require.False(t, p.StaleFetch(k, after), "fetched after it")
	require.False(t, p.StaleFetch(k, before), "the mark is cleared once fresh rows were seen")
}
