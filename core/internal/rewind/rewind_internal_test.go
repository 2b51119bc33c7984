package rewind

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/internal/logtest"
	"github.com/vantage-go/vantage/ports"
)

// downRewind fails the rewinds' backend calls while down is set.
type downRewind struct {
	ports.RewindStore
	ports.SnapshotStore
	ports.CursorStore
	down *atomic.Bool
}

var errDown = fmt.Errorf("connection refused: %w", ports.ErrTransient)

func (d downRewind) StreamLockAcquire(ctx context.Context, p *ports.StreamLockParams) (bool, error) {
	if d.down.Load() {
		return false, errDown
	}
	return d.RewindStore.StreamLockAcquire(ctx, p)
}

func (d downRewind) StreamLockRelease(ctx context.Context, p *ports.StreamLockParams) error {
	if d.down.Load() {
		return errDown
	}
	return d.RewindStore.StreamLockRelease(ctx, p)
}

func (d downRewind) SnapshotSave(ctx context.Context, p *ports.SnapshotSaveParams) error {
	if d.down.Load() {
		return errDown
	}
	return d.SnapshotStore.SnapshotSave(ctx, p)
}

func (d downRewind) CursorsGet(ctx context.Context, p *ports.CursorsGetParams) ([]ports.Cursor, error) {
	if d.down.Load() {
		return nil, errDown
	}
	return d.CursorStore.CursorsGet(ctx, p)
}

// The rewinds' backend calls (their locks, the cursor reads of the
// start-up repair, snapshots) log an outage like any background
// operation: its first failure, then its recovery, not a line per call.
func TestRewindFailuresLoggedOncePerOutage(t *testing.T) {
	t.Parallel()

	mem := memory.New(memory.Options{}).Backend()
	var down atomic.Bool
	d := downRewind{RewindStore: mem.Rewind, SnapshotStore: mem.Snapshots, CursorStore: mem.Cursors, down: &down}
	recs := &logtest.Records{}
	rw := New(base.NewEnv(ports.SystemClock{}, false, slog.New(recs)), Config{
		Rewind: d, Snapshots: d, Cursors: d, InstanceID: uuid.New(), SnapshotEvery: 1,
		LockTimeout: 30 * time.Second, KeepAlive: 10 * time.Second, MaxConcurrent: 1,
	}, Deps{})
	ctx := t.Context()
	key := pair.Key{Stream: uuid.New(), Perspective: "c"}
	event := ports.Event{ID: uuid.New(), StreamID: key.Stream, Version: 1}

	outage := func(n int, call func()) {
		down.Store(true)
		for range n {
			call()
		}
		down.Store(false)
	}
	lock := func() {
		if unlock, ok := rw.lockPair(ctx, key, lockReasonRewind); ok {
			unlock()
		}
	}
	outage(10, func() {
		lock()
		rw.cursorsOf(ctx, []uuid.UUID{key.Stream})
		rw.MaybeSnapshot(ctx, key, 0, event, 0, []byte(`{}`))
	})
	lock()
	rw.cursorsOf(ctx, []uuid.UUID{key.Stream})
	rw.MaybeSnapshot(ctx, key, 0, event, 0, []byte(`{}`))
	for range 10 { // the releases fail
		unlock, ok := rw.lockPair(ctx, key, lockReasonRewind)
		require.True(t, ok)
		outage(1, unlock)
	}
	lock()

	var lines []string
	for _, l := range recs.Lines() {
		if !strings.HasPrefix(l, "DEBUG") {
			lines = append(lines, l)
		}
	}
	require.Equal(t, []string{
		"WARN acquiring stream locks failed; retrying",
		"WARN reading cursors for rewinds failed; retrying",
		"WARN saving snapshots failed; retrying",
		"INFO acquiring stream locks recovered",
		"INFO reading cursors for rewinds recovered",
		"INFO saving snapshots recovered",
		"WARN releasing stream locks failed; retrying",
		"INFO releasing stream locks recovered",
	}, lines)
}
