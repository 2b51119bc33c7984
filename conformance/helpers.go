package conformance

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

// Defaults of the helpers. Tests that depend on a lease or staleness window
// pass their own values.
const (
	staleThreshold = 30 * time.Second
	leaseDuration  = 5 * time.Minute
	maxStreams     = 100
	eventType      = "OrderPlaced"
	otherType      = "OrderShipped"
	perspective    = "orders"
	perspective2   = "shipping"
	wakeTimeout    = 10 * time.Second
	// onePartition is the PartitionCount of claims whose outcome must not
	// depend on a stream's hash: every stream nobody holds is then the
	// lowest-ranked live instance's.
	onePartition = 1
)

// base is the fixed instant every test's time starts from.
var base = clocktest.Start

// at returns base moved forward by d: the explicit Now of every call.
func at(d time.Duration) time.Time { return base.Add(d) }

// testBundle is one test's backend.
type testBundle struct {
	open    Opener
	backend ports.Backend // a handle for calls not made on behalf of an instance
}

// setup creates a fresh backend for t.
func setup(t *testing.T, newBackend NewBackendFunc) *testBundle {
	t.Helper()
	open := newBackend(t)
	return &testBundle{open: open, backend: open(t)}
}

// instance is one simulated engine instance: its id and its own handle.
type instance struct {
	id uuid.UUID
	b  ports.Backend
}

// instances returns n instances ordered by id (their rank order), each with
// its own handle on the bundle's backend.
func (tb *testBundle) instances(t *testing.T, n int) []*instance {
	t.Helper()
	ids := newIDs(t, n)
	out := make([]*instance, n)
	for i, id := range ids {
		out[i] = &instance{id: id, b: tb.open(t)}
	}
	return out
}

// instance returns one instance with its own handle.
func (tb *testBundle) instance(t *testing.T) *instance {
	t.Helper()
	return tb.instances(t, 1)[0]
}

// pair returns two instances, a ranked before b, each with its own handle.
func (tb *testBundle) pair(t *testing.T) (a, b *instance) {
	t.Helper()
	ins := tb.instances(t, 2)
	return ins[0], ins[1]
}

// newIDs returns n UUIDv7 values ordered by their bytes.
func newIDs(t *testing.T, n int) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, n)
	for i := range ids {
		id, err := uuid.NewV7()
		require.NoError(t, err)
		ids[i] = id
	}
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	return ids
}

// newID returns one UUIDv7.
func newID(t *testing.T) uuid.UUID {
	t.Helper()
	return newIDs(t, 1)[0]
}

// heartbeat records a heartbeat of in at now with the default threshold.
func (in *instance) heartbeat(t *testing.T, now time.Time) *ports.InstanceHeartbeatResult {
	t.Helper()
	return in.heartbeatAs(t, now, false)
}

// heartbeatAs records a heartbeat of in at now with the default threshold,
// declaring in passive or not.
func (in *instance) heartbeatAs(t *testing.T, now time.Time, passive bool) *ports.InstanceHeartbeatResult {
	t.Helper()
	res, err := in.b.Claimer.InstanceHeartbeat(t.Context(), &ports.InstanceHeartbeatParams{
		InstanceID:     in.id,
		ServiceName:    "conformance",
		HostName:       "host",
		ProcessID:      1,
		StaleThreshold: staleThreshold,
		Now:            now,
		Passive:        passive,
	})
	require.NoError(t, err)
	require.NotNil(t, res)
	return res
}

// claim claims with the default limits and returns the streams to drain.
func (in *instance) claim(t *testing.T, now time.Time) []uuid.UUID {
	t.Helper()
	return in.claimWith(t, ports.WorkClaimParams{Now: now}).StreamIDs
}

// claimWith claims with p, defaulting every zero limit, and fails t on error.
func (in *instance) claimWith(t *testing.T, p ports.WorkClaimParams) *ports.WorkClaimResult {
	t.Helper()
	res, err := in.tryClaim(t, p)
	require.NoError(t, err)
	require.NotNil(t, res)
	return res
}

// tryClaim claims with p, defaulting every zero limit.
func (in *instance) tryClaim(t *testing.T, p ports.WorkClaimParams) (*ports.WorkClaimResult, error) {
	t.Helper()
	p.InstanceID = in.id
	if p.MaxStreams == 0 {
		p.MaxStreams = maxStreams
	}
	if p.LeaseDuration == 0 {
		p.LeaseDuration = leaseDuration
	}
	if p.StaleThreshold == 0 {
		p.StaleThreshold = staleThreshold
	}
	return in.b.Claimer.WorkClaim(t.Context(), &p)
}

// fetch claims and fetches the pending events of streams with the default
// lease.
func (in *instance) fetch(t *testing.T, now time.Time, streams ...uuid.UUID) *ports.EventsFetchPendingResult {
	t.Helper()
	return in.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: streams, Now: now})
}

// fetchWith fetches with p, defaulting the lease and the threshold.
func (in *instance) fetchWith(t *testing.T, p ports.EventsFetchPendingParams) *ports.EventsFetchPendingResult {
	t.Helper()
	p.InstanceID = in.id
	if p.LeaseDuration == 0 {
		p.LeaseDuration = leaseDuration
	}
	if p.StaleThreshold == 0 {
		p.StaleThreshold = staleThreshold
	}
	res, err := in.b.Fetcher.EventsFetchPending(t.Context(), &p)
	require.NoError(t, err)
	require.NotNil(t, res)
	return res
}

// renew renews the leases of the streams until now+lease and returns the count.
func (in *instance) renew(t *testing.T, now time.Time, lease time.Duration, ids ...uuid.UUID) int {
	t.Helper()
	n, err := in.b.Claimer.WorkRenewLeases(t.Context(), &ports.WorkRenewLeasesParams{
		InstanceID:    in.id,
		StreamIDs:     ids,
		LeaseDuration: lease,
		Now:           now,
	})
	require.NoError(t, err)
	return n
}

// complete reports completions at now.
func (in *instance) complete(t *testing.T, now time.Time, completions ...ports.Completion) *ports.WorkCompleteResult {
	t.Helper()
	return in.completeWith(t, ports.WorkCompleteParams{Completions: completions, Now: now})
}

// completeWith reports completions with p.
func (in *instance) completeWith(t *testing.T, p ports.WorkCompleteParams) *ports.WorkCompleteResult {
	t.Helper()
	p.InstanceID = in.id
	res, err := in.b.Cursors.WorkComplete(t.Context(), &p)
	require.NoError(t, err)
	require.NotNil(t, res)
	return res
}

// fail reports failures at now.
func (in *instance) fail(t *testing.T, now time.Time, failures ...ports.Failure) {
	t.Helper()
	require.NoError(t, in.b.Cursors.WorkFail(t.Context(), &ports.WorkFailParams{
		InstanceID: in.id,
		Failures:   failures,
		Now:        now,
	}))
}

// deadLetter moves a work row to dead letters on behalf of in.
func (in *instance) deadLetter(t *testing.T, now time.Time, workID uuid.UUID) (ports.DeadLetter, bool) {
	t.Helper()
	res, err := in.b.DeadLetters.DeadLetterMove(t.Context(), &ports.DeadLetterMoveParams{
		WorkID:     workID,
		InstanceID: in.id,
		Reason:     ports.ReasonMaxAttemptsExceeded,
		Error:      "boom",
		Now:        now,
	})
	require.NoError(t, err)
	return res.DeadLetter, res.Moved
}

// subscribe registers perspectives for eventType.
func subscribe(t *testing.T, b ports.Backend, eventType string, perspectives ...string) {
	t.Helper()
	subs := make([]ports.Subscription, 0, len(perspectives))
	for _, p := range perspectives {
		subs = append(subs, ports.Subscription{EventType: eventType, Perspective: p})
	}
	require.NoError(t, b.Events.SubscriptionsRegister(t.Context(), &ports.SubscriptionsRegisterParams{Subscriptions: subs}))
}

// newEvent returns an event of type typ, placed at version (0 for the next),
// with a payload naming both.
func newEvent(typ string, version int64) ports.NewEvent {
	return ports.NewEvent{Type: typ, Version: version, Data: fmt.Appendf(nil, `{"type":%q,"version":%d}`, typ, version)}
}

// appendEvents appends events to stream at now without a concurrency check.
func appendEvents(t *testing.T, b ports.Backend, stream uuid.UUID, now time.Time, events ...ports.NewEvent) *ports.EventsAppendResult {
	t.Helper()
	res, err := b.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{StreamID: stream, Events: events, Now: now})
	require.NoError(t, err)
	require.NotNil(t, res)
	require.Len(t, res.Events, len(events))
	return res
}

// appendN appends n events of type typ to stream at now and returns them.
func appendN(t *testing.T, b ports.Backend, stream uuid.UUID, now time.Time, typ string, n int) []ports.Event {
	t.Helper()
	events := make([]ports.NewEvent, n)
	for i := range events {
		events[i] = newEvent(typ, 0)
	}
	return appendEvents(t, b, stream, now, events...).Events
}

// cursorOf returns the cursor of (stream, perspective) and whether it exists.
func cursorOf(t *testing.T, b ports.Backend, stream uuid.UUID, perspective string) (ports.Cursor, bool) {
	t.Helper()
	cursors, err := b.Cursors.CursorsGet(t.Context(), &ports.CursorsGetParams{StreamIDs: []uuid.UUID{stream}, Perspective: perspective})
	require.NoError(t, err)
	require.LessOrEqual(t, len(cursors), 1)
	if len(cursors) == 0 {
		return ports.Cursor{}, false
	}
	require.Equal(t, stream, cursors[0].StreamID)
	require.Equal(t, perspective, cursors[0].Perspective)
	return cursors[0], true
}

// mustCursor returns the cursor of (stream, perspective), failing t when it
// is missing.
func mustCursor(t *testing.T, b ports.Backend, stream uuid.UUID, perspective string) ports.Cursor {
	t.Helper()
	cur, ok := cursorOf(t, b, stream, perspective)
	require.True(t, ok, "cursor (%s, %s) is missing", stream, perspective)
	return cur
}

// requireNoRewind fails t when cur carries any rewind state.
func requireNoRewind(t *testing.T, cur ports.Cursor) {
	t.Helper()
	require.False(t, cur.Status.Has(ports.CursorRewindRequired), "status %s", cur.Status)
	require.Equal(t, uuid.Nil, cur.RewindTriggerEventID)
	require.Zero(t, cur.RewindTriggerVersion)
	require.True(t, cur.RewindFlaggedAt.IsZero(), "RewindFlaggedAt %s", cur.RewindFlaggedAt)
	require.True(t, cur.RewindFirstFlaggedAt.IsZero(), "RewindFirstFlaggedAt %s", cur.RewindFirstFlaggedAt)
}

// requireRewind fails t unless cur requires a rewind triggered by trigger,
// flagged last at flagged and first at first.
func requireRewind(t *testing.T, cur ports.Cursor, trigger ports.Event, flagged, first time.Time) {
	t.Helper()
	require.True(t, cur.Status.Has(ports.CursorRewindRequired), "status %s", cur.Status)
	require.Equal(t, trigger.ID, cur.RewindTriggerEventID)
	require.Equal(t, trigger.Version, cur.RewindTriggerVersion)
	requireTime(t, flagged, cur.RewindFlaggedAt, "RewindFlaggedAt")
	requireTime(t, first, cur.RewindFirstFlaggedAt, "RewindFirstFlaggedAt")
}

// requireTime compares instants, ignoring location and monotonic readings,
// which differ between backends.
func requireTime(t *testing.T, want, got time.Time, what string) {
	t.Helper()
	require.True(t, want.Equal(got), "%s: want %s, got %s", what, want, got)
}

// requireNoWork fails t when res holds any work or event.
func requireNoWork(t *testing.T, res *ports.EventsFetchPendingResult) {
	t.Helper()
	require.Empty(t, res.Work)
	require.Empty(t, res.Events)
}

// workIDs returns the work ids of items.
func workIDs(items []ports.WorkItem) []uuid.UUID {
	out := make([]uuid.UUID, len(items))
	for i, w := range items {
		out[i] = w.WorkID
	}
	return out
}

// versionsOf returns the event versions of items.
func versionsOf(items []ports.WorkItem) []int64 {
	out := make([]int64, len(items))
	for i, w := range items {
		out[i] = w.EventVersion
	}
	return out
}

// attemptsOf returns the attempts of items.
func attemptsOf(items []ports.WorkItem) []int {
	out := make([]int, len(items))
	for i, w := range items {
		out[i] = w.Attempts
	}
	return out
}

// lateOf returns the Late flags of items.
func lateOf(items []ports.WorkItem) []bool {
	out := make([]bool, len(items))
	for i, w := range items {
		out[i] = w.Late
	}
	return out
}

// replayOf returns the Replay flags of items.
func replayOf(items []ports.WorkItem) []bool {
	out := make([]bool, len(items))
	for i, w := range items {
		out[i] = w.Replay
	}
	return out
}

// ofPerspective returns the items of one perspective.
func ofPerspective(items []ports.WorkItem, name string) []ports.WorkItem {
	var out []ports.WorkItem
	for _, w := range items {
		if w.Perspective == name {
			out = append(out, w)
		}
	}
	return out
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// ofStream returns the items of one stream.
func ofStream(items []ports.WorkItem, stream uuid.UUID) []ports.WorkItem {
	var out []ports.WorkItem
	for _, w := range items {
		if w.StreamID == stream {
			out = append(out, w)
		}
	}
	return out
}
