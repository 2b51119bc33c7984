package core

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestGates(t *testing.T) {
	t.Parallel()

	k := pairKey{stream: uuid.New(), perspective: "p"}

	t.Run("SecondHolderWaitsAndContends", func(t *testing.T) {
		t.Parallel()
		g := newGates()
		release, err := g.acquire(t.Context(), k, nil)
		require.NoError(t, err)
		contended := make(chan struct{})
		acquired := make(chan func())
		go func() {
			r, err := g.acquire(context.Background(), k, func() { close(contended) })
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
		require.Zero(t, g.len(), "entries are removed when unused")
	})

	t.Run("OtherPairsDoNotBlock", func(t *testing.T) {
		t.Parallel()
		g := newGates()
		r1, err := g.acquire(t.Context(), k, nil)
		require.NoError(t, err)
		r2, err := g.acquire(t.Context(), pairKey{stream: k.stream, perspective: "other"}, func() { t.Error("contended on another pair") })
		require.NoError(t, err)
		r1()
		r2()
	})

	t.Run("CancelledWaiterLeaves", func(t *testing.T) {
		t.Parallel()
		g := newGates()
		r1, err := g.acquire(t.Context(), k, nil)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err = g.acquire(ctx, k, nil)
		require.ErrorIs(t, err, context.Canceled)
		r1()
		require.Zero(t, g.len())
	})
}
