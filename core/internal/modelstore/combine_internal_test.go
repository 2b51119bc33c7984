package modelstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

// groupStore is a TxModelStore whose grouped call fails as a whole when one
// of its entries' Apply fails, as a transaction a cancelled statement
// closed does; its single call returns Apply's error.
type groupStore struct {
	calls [][]uuid.UUID // the streams of each grouped call
}

func (s *groupStore) ModelSaveTx(ctx context.Context, p *ports.ModelSaveTxParams) error {
	return p.Apply(ctx, nil)
}

func (s *groupStore) ModelSaveTxMany(ctx context.Context, p *ports.ModelSaveTxManyParams) ([]error, error) {
	var streams []uuid.UUID
	for _, e := range p.Saves {
		streams = append(streams, e.Save.StreamID)
	}
	s.calls = append(s.calls, streams)
	for _, e := range p.Saves {
		if err := e.Apply(ctx, nil); err != nil {
			return nil, fmt.Errorf("rolling back to the savepoint after %w: connection closed", err)
		}
	}
	return make([]error, len(p.Saves)), nil
}

// A write that breaks a grouped transaction fails its own save only: the
// others are sent again without it and saved.
func TestTxSavesLeaveTheBrokenWriteOut(t *testing.T) {
	t.Parallel()
	store := &groupStore{}
	saves := newTxSaves(store, clocktest.NewFake(), time.Second, time.Minute)
	streams := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	errBroken := errors.New("statement cancelled")
	entries := make([]*ports.ModelSaveTxParams, len(streams))
	for i, s := range streams {
		entries[i] = &ports.ModelSaveTxParams{
			Save: ports.ModelSaveParams{StreamID: s, Perspective: "lines"},
			Apply: func(context.Context, ports.Tx) error {
				if i == 1 {
					return &WriteFailure{Key: pair.Key{Stream: s, Perspective: "lines"}, Index: 0, Cause: errBroken}
				}
				return nil
			},
		}
	}

	res, err := saves.send(t.Context(), entries)
	require.NoError(t, err)
	require.NoError(t, res[0])
	require.ErrorIs(t, res[1], errBroken)
	require.NoError(t, res[2])
	require.Equal(t, [][]uuid.UUID{streams, {streams[0], streams[2]}}, store.calls)

	// An error that names no entry fails them all.
	entries[1].Apply = func(context.Context, ports.Tx) error { return errBroken }
	_, err = saves.send(t.Context(), entries)
	require.ErrorIs(t, err, errBroken)
}

// The writes of a shared save that run past the patience are cut: that
// save fails with ErrGroupPatience (and its WriteFailure, so that it is
// told apart from the others), the others are sent again at once without
// it and saved. A save the combiner sends alone is shared too (the saves
// queued behind its sender wait for it): its writes get the same patience.
func TestTxSavesCutWritesPastThePatience(t *testing.T) {
	t.Parallel()
	clock := clocktest.NewFake()
	store := &groupStore{}
	const patience = time.Second
	saves := newTxSaves(store, clock, patience, time.Minute)
	streams := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	blocked := make(chan struct{}, 2)
	slow := func(s uuid.UUID) func(ctx context.Context, _ ports.Tx) error {
		return func(ctx context.Context, _ ports.Tx) error {
			blocked <- struct{}{}
			<-ctx.Done()
			return &WriteFailure{Key: pair.Key{Stream: s, Perspective: "lines"}, Index: 0, Cause: fmt.Errorf("inserting: %w", ctx.Err())}
		}
	}
	entries := make([]*ports.ModelSaveTxParams, len(streams))
	for i, s := range streams {
		entries[i] = &ports.ModelSaveTxParams{
			Save:  ports.ModelSaveParams{StreamID: s, Perspective: "lines"},
			Apply: func(context.Context, ports.Tx) error { return nil },
		}
	}
	entries[1].Apply = slow(streams[1])

	type result struct {
		res []error
		err error
	}
	sent := make(chan result, 1)
	go func() {
		res, err := saves.send(t.Context(), entries)
		sent <- result{res, err}
	}()
	<-blocked
	clock.Advance(patience)
	r := <-sent
	require.NoError(t, r.err)
	require.NoError(t, r.res[0])
	require.ErrorIs(t, r.res[1], ErrGroupPatience)
	var wf *WriteFailure
	require.ErrorAs(t, r.res[1], &wf)
	require.Equal(t, streams[1], wf.Key.Stream)
	require.NoError(t, r.res[2])
	require.Equal(t, [][]uuid.UUID{streams, {streams[0], streams[2]}}, store.calls, "the others sent again without it")
	require.Zero(t, clock.Timers(), "no patience left armed")

	go func() {
		res, err := saves.send(t.Context(), entries[1:2])
		sent <- result{res, err}
	}()
	<-blocked
	clock.Advance(patience)
	r = <-sent
	require.NoError(t, r.err)
	require.ErrorIs(t, r.res[0], ErrGroupPatience, "a save sent alone by the combiner")
}

// idleStore is a TxModelStore that records the IdleTimeout of each save.
type idleStore struct {
	mu    sync.Mutex
	idles []time.Duration
}

func (s *idleStore) ModelSaveTx(_ context.Context, p *ports.ModelSaveTxParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.idles = append(s.idles, p.IdleTimeout)
	return nil
}

func (s *idleStore) ModelSaveTxMany(_ context.Context, p *ports.ModelSaveTxManyParams) ([]error, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range p.Saves {
		s.idles = append(s.idles, e.IdleTimeout)
	}
	return make([]error, len(p.Saves)), nil
}

// A save of a table projection that sets no IdleTimeout is sent with the
// Store's, alone or shared; one that sets its own keeps it, and the
// caller's params are left as they were.
func TestSaveTxBoundsTheIdleTime(t *testing.T) {
	t.Parallel()
	tx := &idleStore{}
	s := New(Config{Tx: tx, Clock: clocktest.NewFake(), CallTimeout: time.Minute, ApplyTimeout: 2 * time.Second, TxIdleTimeout: 4 * time.Second})
	params := func(idle time.Duration) *ports.ModelSaveTxParams {
		return &ports.ModelSaveTxParams{
			Save:        ports.ModelSaveParams{StreamID: uuid.New(), Perspective: "lines", LastVersion: 1},
			Apply:       func(context.Context, ports.Tx) error { return nil },
			IdleTimeout: idle,
		}
	}

	unset := params(0)
	require.NoError(t, s.SaveTx(t.Context(), true, unset))
	require.NoError(t, s.SaveTx(t.Context(), false, params(0)))
	require.NoError(t, s.SaveTx(t.Context(), true, params(time.Second)))
	require.Equal(t, []time.Duration{4 * time.Second, 4 * time.Second, time.Second}, tx.idles)
	require.Zero(t, unset.IdleTimeout, "the caller's params stay as they are")
}
