package enginetest_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

// countingClaimer counts the claims and signals each on claimed.
type countingClaimer struct {
	ports.WorkClaimer
	claims  atomic.Int64
	claimed chan struct{}
}

func (c *countingClaimer) WorkClaim(ctx context.Context, p *ports.WorkClaimParams) (*ports.WorkClaimResult, error) {
	res, err := c.WorkClaimer.WorkClaim(ctx, p)
	c.claims.Add(1)
	select {
	case c.claimed <- struct{}{}:
	default:
	}
	return res, err
}

// TestNotifiedStreamsDrainWithoutClaim checks that a sole instance drains
// the streams a notification names without claiming them, and that an
// instance with a live peer claims them, as the peer may own them.
func TestNotifiedStreamsDrainWithoutClaim(t *testing.T) {
	for name, peer := range map[string]bool{"Alone": false, "WithPeer": true} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			store := memory.New(memory.Options{})
			t.Cleanup(func() { _ = store.Close() })
			b := store.Backend()
			if peer {
				_, err := b.Claimer.InstanceHeartbeat(ctx, &ports.InstanceHeartbeatParams{
					InstanceID: uuid.New(), ServiceName: "peer", StaleThreshold: 2 * time.Hour,
					// Passive: it counts as live, but every partition stays ours.
					Passive: true})
				require.NoError(t, err)
			}
			claimer := &countingClaimer{WorkClaimer: b.Claimer, claimed: make(chan struct{}, 1)}
			b.Claimer = claimer
			processed := make(chan int64, 4)
			reg := pingRegistry(t, nil)
			w, err := core.New(b, reg, &core.Options{
				Claims: core.ClaimOptions{
					// No claim but the first and the notified ones while the
					// test runs; the heartbeat at Start is the only one.
					Interval:               time.Hour,
					NotifyHealthyInterval:  time.Hour,
					HeartbeatInterval:      time.Hour,
					StaleInstanceThreshold: 2 * time.Hour,
				},
				Hooks: core.Hooks{OnPerspectiveEventProcessed: func(e core.PerspectiveEventProcessed) {
					processed <- e.LastVersion
				}},
			})
			require.NoError(t, err)
			require.NoError(t, w.Start(ctx))
			t.Cleanup(func() { require.NoError(t, w.Stop(context.WithoutCancel(ctx))) })
			select {
			case <-claimer.claimed: // the first claim, at start
			case <-time.After(10 * time.Second):
				t.Fatal("no claim at start")
			}

			stream := uuid.New()
			for n := range 3 {
				_, err = reg.Append(ctx, b.Events, stream, 0, pinged{N: n})
				require.NoError(t, err)
				select {
				case v := <-processed:
					require.Equal(t, int64(n+1), v)
				case <-time.After(10 * time.Second):
					t.Fatalf("event %d not processed", n+1)
				}
			}
			if peer {
				require.GreaterOrEqual(t, claimer.claims.Load(), int64(2), "notified appends were claimed")
			} else {
				require.Equal(t, int64(1), claimer.claims.Load(), "only the claim at start")
			}
		})
	}
}
