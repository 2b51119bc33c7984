package core

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core/internal/modelstore"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

// A projection write past its limit gets a cancelled context, and its
// error says it ran past its deadline whatever the write returned; a
// write within its limit is left alone.
func TestProjectionWriteDeadline(t *testing.T) {
	t.Parallel()
	clock := clocktest.NewFake()
	p := NewProjection("lines", func(context.Context, ports.Tx, uuid.UUID) error { return nil })
	limit := modelstore.WriteLimit{Timeout: time.Second, Clock: clock}

	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- p.call(t.Context(), limit, func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			return errors.New("driver: conn closed")
		})
	}()
	<-started
	<-clock.WaitTimers(1)
	clock.Advance(time.Second)
	err := <-done
	require.ErrorIs(t, err, modelstore.ErrWriteDeadline)
	require.ErrorContains(t, err, "driver: conn closed")

	errOwn := errors.New("refused")
	require.Equal(t, errOwn, p.call(t.Context(), limit, func(context.Context) error { return errOwn }))
	require.ErrorContains(t, p.call(t.Context(), limit, func(context.Context) error { panic("boom") }), `projection "lines" panicked: boom`)
}
