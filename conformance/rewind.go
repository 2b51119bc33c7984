package conformance

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// Lock reasons and duration of the stream lock cases.
const (
	reasonRewind  = "rewind"
	reasonRebuild = "rebuild"
	lockDuration  = 30 * time.Second
)

// runRewind verifies ports.RewindStore, an optional port.
func runRewind(t *testing.T, newBackend NewBackendFunc, implemented, admin bool) {
	t.Helper()
	const port = "RewindStore"

	optionalGroup(t, "CursorsRewindRequired", port, implemented, map[string]func(t *testing.T){
		"ClearedByCompletion": func(t *testing.T) {
			f := setupDrain(t, newBackend, 3)
			f.a.complete(t, at(time.Second), f.completion(3, 3))
			require.Len(t, rewindRequired(t, f.tb.backend, 0), 1)

			f.a.complete(t, at(2*time.Second), f.completion(3, 1, 2))

			require.Empty(t, rewindRequired(t, f.tb.backend, 0))
		},
		"ListsCursorFlaggedByLateAppend": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			streams := newIDs(t, 2)
			events := appendEvents(t, tb.backend, streams[0], at(0), newEvent(eventType, 1), newEvent(eventType, 3)).Events
			other := appendN(t, tb.backend, streams[1], at(0), eventType, 1)
			a.heartbeat(t, at(0))
			res := a.fetch(t, at(0), streams...)
			a.complete(t, at(time.Second),
				ports.Completion{StreamID: streams[0], Perspective: perspective, LastEventID: events[1].ID, LastVersion: 3, WorkIDs: workIDs(res.Work[:2])},
				ports.Completion{StreamID: streams[1], Perspective: perspective, LastEventID: other[0].ID, LastVersion: 1, WorkIDs: workIDs(res.Work[2:])},
			)
			require.Empty(t, rewindRequired(t, tb.backend, 0))

			late := appendEvents(t, tb.backend, streams[0], at(2*time.Second), newEvent(eventType, 2)).Events[0]

			got := rewindRequired(t, tb.backend, 0)
			require.Equal(t, []ports.Cursor{mustCursor(t, tb.backend, streams[0], perspective)}, got)
			require.Equal(t, int64(3), got[0].LastVersion)
			requireRewind(t, got[0], late, at(2*time.Second), at(2*time.Second))
		},
		"ListsCursorFlaggedByStraggler": func(t *testing.T) {
			f := setupDrain(t, newBackend, 3)

			f.a.complete(t, at(time.Second), f.completion(3, 3))

			got := rewindRequired(t, f.tb.backend, 0)
			require.Equal(t, []ports.Cursor{f.cursor(t)}, got)
			requireRewind(t, got[0], f.events[0], at(time.Second), at(time.Second))
		},
		"OrderedByStreamThenPerspective": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective, perspective2)
			streams := newIDs(t, 2)
			events := map[uuid.UUID][]ports.Event{}
			for _, s := range streams {
				events[s] = appendN(t, tb.backend, s, at(0), eventType, 2)
			}
			a.heartbeat(t, at(0))
			work := a.fetch(t, at(0), streams...).Work
			// Complete only version 2 of every pair, in reverse order: version 1
			// is left pending below each cursor.
			for _, s := range []uuid.UUID{streams[1], streams[0]} {
				for _, p := range []string{perspective2, perspective} {
					var ids []uuid.UUID
					for _, w := range ofPerspective(work, p) {
						if w.StreamID == s && w.EventVersion == 2 {
							ids = append(ids, w.WorkID)
						}
					}
					a.complete(t, at(time.Second), ports.Completion{
						StreamID: s, Perspective: p, LastEventID: events[s][1].ID, LastVersion: 2, WorkIDs: ids,
					})
				}
			}

			key := func(c ports.Cursor) string { return c.StreamID.String() + "/" + c.Perspective }
			var got []string
			for _, c := range rewindRequired(t, tb.backend, 0) {
				got = append(got, key(c))
			}
			want := []string{
				streams[0].String() + "/" + perspective, streams[0].String() + "/" + perspective2,
				streams[1].String() + "/" + perspective, streams[1].String() + "/" + perspective2,
			}
			require.Equal(t, want, got)
			got = got[:0]
			for _, c := range rewindRequired(t, tb.backend, 3) {
				got = append(got, key(c))
			}
			require.Equal(t, want[:3], got)
		},
		"RejectsNegativeLimit": func(t *testing.T) {
			tb := setup(t, newBackend)

			_, err := tb.backend.Rewind.CursorsRewindRequired(t.Context(), &ports.CursorsRewindRequiredParams{Limit: -1})

			require.ErrorIs(t, err, ports.ErrInvalidArgument)
		},
	})

	optionalGroup(t, "StreamLockAcquire", port, implemented, map[string]func(t *testing.T){
		"ConcurrentAcquiresHaveOneWinner": func(t *testing.T) {
			tb := setup(t, newBackend)
			const contenders = 8
			ins := tb.instances(t, contenders)
			stream := newID(t)
			held := make([]bool, contenders)
			errs := make([]error, contenders)
			var wg sync.WaitGroup
			for i, in := range ins {
				wg.Go(func() {
					held[i], errs[i] = in.b.Rewind.StreamLockAcquire(t.Context(), in.lockParams(stream, perspective, at(0)))
				})
			}
			wg.Wait()

			var winners []uuid.UUID
			for i, in := range ins {
				require.NoError(t, errs[i])
				if held[i] {
					winners = append(winners, in.id)
				}
			}
			require.Len(t, winners, 1)
			require.Equal(t, winners[0], streamLocks(t, tb.backend, stream, at(time.Second))[perspective].InstanceID)
		},
		"ContendedByAnotherInstance": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			stream := newID(t)
			require.True(t, a.acquireLock(t, at(0), stream, perspective))

			require.False(t, b.acquireLock(t, at(10*time.Second), stream, perspective))

			requireLock(t, tb.backend, stream, at(10*time.Second), map[string]ports.StreamLock{
				perspective: {InstanceID: a.id, Reason: reasonRewind, Expiry: at(lockDuration)},
			})
		},
		"ExpiryLetsOthersIn": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			stream := newID(t)
			require.True(t, a.acquireLock(t, at(0), stream, perspective))

			require.False(t, b.acquireLock(t, at(lockDuration-time.Second), stream, perspective))
			require.True(t, b.acquireLock(t, at(lockDuration), stream, perspective), "the lock expires at its expiry")
			require.False(t, a.acquireLock(t, at(lockDuration+time.Second), stream, perspective), "b holds it now")

			requireLock(t, tb.backend, stream, at(lockDuration), map[string]ports.StreamLock{
				perspective: {InstanceID: b.id, Reason: reasonRewind, Expiry: at(2 * lockDuration)},
			})
		},
		"HolderExtends": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			stream := newID(t)
			require.True(t, a.acquireLock(t, at(0), stream, perspective))

			p := a.lockParams(stream, perspective, at(20*time.Second))
			p.Reason = reasonRebuild
			held, err := a.b.Rewind.StreamLockAcquire(t.Context(), p)
			require.NoError(t, err)
			require.True(t, held)

			requireLock(t, tb.backend, stream, at(20*time.Second), map[string]ports.StreamLock{
				perspective: {InstanceID: a.id, Reason: reasonRebuild, Expiry: at(20*time.Second + lockDuration)},
			})
			require.False(t, b.acquireLock(t, at(lockDuration+time.Second), stream, perspective), "the extended lock is still a's")
			require.True(t, b.acquireLock(t, at(20*time.Second+lockDuration), stream, perspective))
		},
		"KeepsExistingCursor": func(t *testing.T) {
			f := setupDrain(t, newBackend, 3)
			f.a.complete(t, at(time.Second), f.completion(3, 3))
			before := f.cursor(t)

			require.True(t, f.a.acquireLock(t, at(2*time.Second), f.stream, perspective))

			after := f.cursor(t)
			require.Equal(t, before.LastEventID, after.LastEventID)
			require.Equal(t, before.LastVersion, after.LastVersion)
			require.Equal(t, before.Status, after.Status)
			requireRewind(t, after, f.events[0], at(time.Second), at(time.Second))
		},
		"LocksArePerStreamAndPerspective": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			streams := newIDs(t, 2)
			require.True(t, a.acquireLock(t, at(0), streams[0], perspective))

			require.True(t, b.acquireLock(t, at(time.Second), streams[0], perspective2))
			require.True(t, b.acquireLock(t, at(time.Second), streams[1], perspective))

			requireLock(t, tb.backend, streams[0], at(time.Second), map[string]ports.StreamLock{
				perspective:  {InstanceID: a.id, Reason: reasonRewind, Expiry: at(lockDuration)},
				perspective2: {InstanceID: b.id, Reason: reasonRewind, Expiry: at(time.Second + lockDuration)},
			})
		},
		"RejectsInvalidArguments": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			stream := newID(t)
			for name, edit := range map[string]func(p *ports.StreamLockParams){
				"nil stream":        func(p *ports.StreamLockParams) { p.StreamID = uuid.Nil },
				"empty perspective": func(p *ports.StreamLockParams) { p.Perspective = "" },
				"nil instance":      func(p *ports.StreamLockParams) { p.InstanceID = uuid.Nil },
				"zero duration":     func(p *ports.StreamLockParams) { p.Duration = 0 },
				"negative duration": func(p *ports.StreamLockParams) { p.Duration = -time.Second },
			} {
				p := a.lockParams(stream, perspective, at(0))
				edit(p)
				_, err := a.b.Rewind.StreamLockAcquire(t.Context(), p)
				require.ErrorIs(t, err, ports.ErrInvalidArgument, name)
			}
			require.Empty(t, streamLocks(t, tb.backend, stream, at(0)))
			_, exists := cursorOf(t, tb.backend, stream, perspective)
			require.False(t, exists, "a rejected request creates no cursor")
		},
		"TakesFreeLockAndCreatesCursor": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			stream := newID(t)

			require.True(t, a.acquireLock(t, at(0), stream, perspective))

			requireLock(t, tb.backend, stream, at(0), map[string]ports.StreamLock{
				perspective: {InstanceID: a.id, Reason: reasonRewind, Expiry: at(lockDuration)},
			})
			cur := mustCursor(t, tb.backend, stream, perspective)
			require.Equal(t, ports.CursorNone, cur.Status)
			require.Equal(t, uuid.Nil, cur.LastEventID)
			require.Zero(t, cur.LastVersion)
			require.Empty(t, cur.Error)
			requireNoRewind(t, cur)
		},
	})

	optionalGroup(t, "StreamLockRelease", port, implemented, map[string]func(t *testing.T){
		"AfterTakeoverIsNoop": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			stream := newID(t)
			require.True(t, a.acquireLock(t, at(0), stream, perspective))
			require.True(t, b.acquireLock(t, at(lockDuration), stream, perspective))

			a.releaseLock(t, stream, perspective)

			requireLock(t, tb.backend, stream, at(lockDuration), map[string]ports.StreamLock{
				perspective: {InstanceID: b.id, Reason: reasonRewind, Expiry: at(2 * lockDuration)},
			})
		},
		"NonHolderIsNoop": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			stream := newID(t)
			require.True(t, a.acquireLock(t, at(0), stream, perspective))

			b.releaseLock(t, stream, perspective)

			require.False(t, b.acquireLock(t, at(time.Second), stream, perspective))
			require.Equal(t, a.id, streamLocks(t, tb.backend, stream, at(time.Second))[perspective].InstanceID)
		},
		"RejectsInvalidArguments": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			for name, edit := range map[string]func(p *ports.StreamLockParams){
				"nil stream":        func(p *ports.StreamLockParams) { p.StreamID = uuid.Nil },
				"empty perspective": func(p *ports.StreamLockParams) { p.Perspective = "" },
				"nil instance":      func(p *ports.StreamLockParams) { p.InstanceID = uuid.Nil },
			} {
				p := a.lockParams(newID(t), perspective, at(0))
				edit(p)
				require.ErrorIs(t, a.b.Rewind.StreamLockRelease(t.Context(), p), ports.ErrInvalidArgument, name)
			}
		},
		"ReleasesOwnLock": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			stream := newID(t)
			require.True(t, a.acquireLock(t, at(0), stream, perspective))

			a.releaseLock(t, stream, perspective)

			require.Empty(t, streamLocks(t, tb.backend, stream, at(time.Second)))
			require.True(t, b.acquireLock(t, at(time.Second), stream, perspective))
		},
		"UnknownPairIsNoop": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			stream := newID(t)

			a.releaseLock(t, stream, perspective)

			_, exists := cursorOf(t, tb.backend, stream, perspective)
			require.False(t, exists, "releasing creates no cursor")
			require.Empty(t, streamLocks(t, tb.backend, stream, at(0)))
		},
	})

	optionalGroup(t, "StreamLocks", "Admin", implemented && admin, map[string]func(t *testing.T){
		"EmptyWithoutLocks": func(t *testing.T) {
			f := setupDrain(t, newBackend, 1)
			f.a.complete(t, at(time.Second), f.completion(1, 1))

			require.Empty(t, streamLocks(t, f.tb.backend, f.stream, at(time.Second)), "a cursor without a lock")
			require.Empty(t, streamLocks(t, f.tb.backend, newID(t), at(time.Second)), "an unknown stream")
		},
		"ListsUnexpiredHoldersByPerspective": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			streams := newIDs(t, 2)
			require.True(t, a.acquireLock(t, at(0), streams[0], perspective))
			p := b.lockParams(streams[0], perspective2, at(0))
			p.Reason, p.Duration = reasonRebuild, 2*lockDuration
			held, err := b.b.Rewind.StreamLockAcquire(t.Context(), p)
			require.NoError(t, err)
			require.True(t, held)
			require.True(t, a.acquireLock(t, at(0), streams[1], perspective))

			requireLock(t, tb.backend, streams[0], at(lockDuration-time.Second), map[string]ports.StreamLock{
				perspective:  {InstanceID: a.id, Reason: reasonRewind, Expiry: at(lockDuration)},
				perspective2: {InstanceID: b.id, Reason: reasonRebuild, Expiry: at(2 * lockDuration)},
			})
			requireLock(t, tb.backend, streams[0], at(lockDuration), map[string]ports.StreamLock{
				perspective2: {InstanceID: b.id, Reason: reasonRebuild, Expiry: at(2 * lockDuration)},
			})
			require.Empty(t, streamLocks(t, tb.backend, streams[0], at(2*lockDuration)))
		},
	})

	optionalGroup(t, "StreamsWithEventTypes", port, implemented, map[string]func(t *testing.T){
		"MatchesAnyListedType": func(t *testing.T) {
			tb := setup(t, newBackend)
			s := newIDs(t, 4)
			appendN(t, tb.backend, s[0], at(0), eventType, 2)
			appendN(t, tb.backend, s[1], at(0), otherType, 1)
			appendN(t, tb.backend, s[2], at(0), "Third", 1)
			appendEvents(t, tb.backend, s[3], at(0), newEvent(otherType, 0), newEvent(eventType, 0))

			require.Equal(t, []uuid.UUID{s[0], s[1], s[3]}, streamsWith(t, tb.backend, uuid.Nil, 0, eventType, otherType))
			require.Equal(t, []uuid.UUID{s[0], s[1]}, streamsWith(t, tb.backend, uuid.Nil, 2, otherType, eventType))
			require.Equal(t, []uuid.UUID{s[0], s[3]}, streamsWith(t, tb.backend, uuid.Nil, 0, eventType, eventType))
			require.Equal(t, []uuid.UUID{s[2]}, streamsWith(t, tb.backend, uuid.Nil, 0, "Third"))
			require.Empty(t, streamsWith(t, tb.backend, uuid.Nil, 0, "Unknown"))
			require.Empty(t, streamsWith(t, tb.backend, uuid.Nil, 0))
		},
		"PagesInByteOrder": func(t *testing.T) {
			tb := setup(t, newBackend)
			s := newIDs(t, 5)
			for i := len(s) - 1; i >= 0; i-- {
				appendN(t, tb.backend, s[i], at(0), eventType, 2)
			}

			require.Equal(t, s[:2], streamsWith(t, tb.backend, uuid.Nil, 2, eventType))
			require.Equal(t, s[2:4], streamsWith(t, tb.backend, s[1], 2, eventType))
			require.Equal(t, s[4:], streamsWith(t, tb.backend, s[3], 2, eventType))
			require.Empty(t, streamsWith(t, tb.backend, s[4], 2, eventType))
			require.Equal(t, s, streamsWith(t, tb.backend, uuid.Nil, 0, eventType), "zero means no limit")
			require.Equal(t, s[3:], streamsWith(t, tb.backend, newIDBetween(t, s[2], s[3]), 0, eventType),
				"After need not be a stream")
		},
		"RejectsNegativeLimit": func(t *testing.T) {
			tb := setup(t, newBackend)

			_, err := tb.backend.Rewind.StreamsWithEventTypes(t.Context(), &ports.StreamsWithEventTypesParams{EventTypes: []string{eventType}, Limit: -1})

			require.ErrorIs(t, err, ports.ErrInvalidArgument)
		},
	})

	optionalGroup(t, "WorkLate", port, implemented, map[string]func(t *testing.T){
		"ListsLateRowsInVersionOrderForAnyCaller": func(t *testing.T) {
			f := setupDrain(t, newBackend, 3)
			f.a.complete(t, at(time.Second), f.completion(3, 3))
			appendN(t, f.tb.backend, f.stream, at(2*time.Second), eventType, 1)

			got, err := f.tb.backend.Rewind.WorkLate(t.Context(), &ports.WorkLateParams{StreamID: f.stream, Perspective: perspective})

			require.NoError(t, err)
			require.Equal(t, []int64{1, 2}, versionsOf(got), "the stragglers, not the row above the cursor")
			require.Equal(t, workIDs(f.work[:2]), workIDs(got))
			require.Equal(t, []bool{true, true}, lateOf(got))
			require.Equal(t, []bool{false, false}, replayOf(got))
			require.Equal(t, f.events[0].ID, got[0].EventID)
			require.Equal(t, f.stream, got[0].StreamID)
			require.Equal(t, perspective, got[0].Perspective)
		},
		"ASaveTakesTheLateFlagOffTheRowsItApplied": func(t *testing.T) {
			f := setupDrain(t, newBackend, 3)
			f.a.complete(t, at(time.Second), f.completion(3, 3))
			late := func() []int64 {
				got, err := f.tb.backend.Rewind.WorkLate(t.Context(), &ports.WorkLateParams{StreamID: f.stream, Perspective: perspective})
				require.NoError(t, err)
				return versionsOf(got)
			}
			require.Equal(t, []int64{1, 2}, late())
			c := f.cursor(t)
			save := func(expected int64, applied ...int64) error {
				return f.tb.backend.Models.ModelSave(t.Context(), &ports.ModelSaveParams{
					StreamID: f.stream, Perspective: perspective, Data: []byte(`{"n":3}`),
					LastEventID: f.events[2].ID, LastVersion: 3, ExpectedVersion: expected, ExpectedEpoch: c.Epoch,
					Rebase: true, AppliedLate: applied, Now: at(2 * time.Second),
				})
			}

			require.ErrorIs(t, save(2, 1, 2), ports.ErrVersionConflict)
			require.Equal(t, []int64{1, 2}, late(), "a refused save changes no row")
			require.NoError(t, save(3, 1))
			require.Equal(t, []int64{2}, late(), "the row of the event the save applied is no longer late")
			rows := f.a.fetch(t, at(3*time.Second), f.stream).Work
			require.Equal(t, []int64{1, 2}, versionsOf(rows), "it is still pending, for its completion")
			require.Equal(t, []bool{false, true}, lateOf(rows))
		},
		"EmptyWithoutLateRows": func(t *testing.T) {
			f := setupDrain(t, newBackend, 2)

			got, err := f.tb.backend.Rewind.WorkLate(t.Context(), &ports.WorkLateParams{StreamID: f.stream, Perspective: perspective})
			require.NoError(t, err)
			require.Empty(t, got)
			got, err = f.tb.backend.Rewind.WorkLate(t.Context(), &ports.WorkLateParams{StreamID: newID(t), Perspective: perspective})
			require.NoError(t, err)
			require.Empty(t, got)
		},
		"RejectsInvalidArguments": func(t *testing.T) {
			tb := setup(t, newBackend)

			_, err := tb.backend.Rewind.WorkLate(t.Context(), &ports.WorkLateParams{Perspective: perspective})
			require.ErrorIs(t, err, ports.ErrInvalidArgument)
			_, err = tb.backend.Rewind.WorkLate(t.Context(), &ports.WorkLateParams{StreamID: newID(t)})
			require.ErrorIs(t, err, ports.ErrInvalidArgument)
		},
	})
}

// lockParams returns in's request for the lock of (stream, perspective) at
// now, for the rewind reason and the default duration.
func (in *instance) lockParams(stream uuid.UUID, perspective string, now time.Time) *ports.StreamLockParams {
	return &ports.StreamLockParams{
		StreamID:    stream,
		Perspective: perspective,
		InstanceID:  in.id,
		Reason:      reasonRewind,
		Duration:    lockDuration,
		Now:         now,
	}
}

// acquireLock asks for the lock of (stream, perspective) at now and reports
// whether in holds it.
func (in *instance) acquireLock(t *testing.T, now time.Time, stream uuid.UUID, perspective string) bool {
	t.Helper()
	held, err := in.b.Rewind.StreamLockAcquire(t.Context(), in.lockParams(stream, perspective, now))
	require.NoError(t, err)
	return held
}

// releaseLock releases the lock of (stream, perspective) on behalf of in.
func (in *instance) releaseLock(t *testing.T, stream uuid.UUID, perspective string) {
	t.Helper()
	require.NoError(t, in.b.Rewind.StreamLockRelease(t.Context(), in.lockParams(stream, perspective, time.Time{})))
}

// streamLocks returns the unexpired locks of stream at now.
func streamLocks(t *testing.T, b ports.Backend, stream uuid.UUID, now time.Time) map[string]ports.StreamLock {
	t.Helper()
	r, ok := b.Rewind.(ports.LockReader)
	if !ok {
		t.Skip("the adapter's RewindStore does not implement ports.LockReader")
	}
	locks, err := r.StreamLocks(t.Context(), &ports.StreamLocksParams{StreamID: stream, Now: now})
	require.NoError(t, err)
	return locks
}

// requireLock fails t unless the unexpired locks of stream at now are want.
func requireLock(t *testing.T, b ports.Backend, stream uuid.UUID, now time.Time, want map[string]ports.StreamLock) {
	t.Helper()
	got := streamLocks(t, b, stream, now)
	require.Equal(t, sortedKeys(want), sortedKeys(got))
	for name, w := range want {
		require.Equal(t, w.InstanceID, got[name].InstanceID, name)
		require.Equal(t, w.Reason, got[name].Reason, name)
		requireTime(t, w.Expiry, got[name].Expiry, name+" expiry")
	}
}

// rewindRequired lists the cursors requiring a rewind, at most limit.
func rewindRequired(t *testing.T, b ports.Backend, limit int) []ports.Cursor {
	t.Helper()
	cursors, err := b.Rewind.CursorsRewindRequired(t.Context(), &ports.CursorsRewindRequiredParams{Limit: limit})
	require.NoError(t, err)
	return cursors
}

// streamsWith returns a page of the streams having events of types.
func streamsWith(t *testing.T, b ports.Backend, after uuid.UUID, limit int, types ...string) []uuid.UUID {
	t.Helper()
	ids, err := b.Rewind.StreamsWithEventTypes(t.Context(), &ports.StreamsWithEventTypesParams{EventTypes: types, After: after, Limit: limit})
	require.NoError(t, err)
	return ids
}

// newIDBetween returns lo plus one, which must be below hi in byte order:
// two random UUIDv7 values are never that close in practice.
func newIDBetween(t *testing.T, lo, hi uuid.UUID) uuid.UUID {
	t.Helper()
	id := lo
	for i := len(id) - 1; i >= 0; i-- {
		if id[i]++; id[i] != 0 {
			break
		}
	}
	require.Negative(t, bytes.Compare(id[:], hi[:]), "no id between %s and %s", lo, hi)
	return id
}
