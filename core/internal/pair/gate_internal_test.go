package pair

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestGates(t *testing.T) {
	t.Parallel()

	k := Key{Stream: uuid.New(), Perspective: "p"}

	t.Run("SecondHolderWaitsAndContends", func(t *testing.T) {
		t.Parallel()
		g := NewGates()
		release, err := g.Acquire(t.Context(), k, nil)
		require.NoError(t, err)
		contended := make(chan struct{})
		acquired := make(chan func())
		go func() {
			r, err := g.Acquire(context.Background(), k, func() { close(contended) })
			if err == nil {
				acquired <- r
			}
		}()
		<-contended
		select {
		case <-acquired:
			t.Fatal("second holder got the gate while it was held")
		default:
		}
		release()
		r2 := <-acquired
		r2()
		require.Zero(t, g.Len(), "entries are removed when unused")
	})

	t.Run("OtherPairsDoNotBlock", func(t *testing.T) {
		t.Parallel()
		g := NewGates()
		r1, err := g.Acquire(t.Context(), k, nil)
		require.NoError(t, err)
		r2, err := g.Acquire(t.Context(), Key{Stream: k.Stream, Perspective: "other"}, func() { t.Error("contended on another pair") })
		require.NoError(t, err)
		r1()
		r2()
	})

	t.Run("CancelledWaiterLeaves", func(t *testing.T) {
		t.Parallel()
		g := NewGates()
		r1, err := g.Acquire(t.Context(), k, nil)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err = g.Acquire(ctx, k, nil)
		require.ErrorIs(t, err, context.Canceled)
		r1()
		require.Zero(t, g.Len())
	})
}
