package conformance

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// invalidCall is a port call with params that one field makes invalid.
type invalidCall struct {
	// name is the params field at fault, as the case names it.
	name string
	// port names the optional port the call needs; empty for a required
	// one.
	port string
	call func(t *testing.T, b ports.Backend) error
}

// runValidate verifies that the adapter rejects, with ErrInvalidArgument,
// every params value whose Validate method rejects, and changes nothing
// doing so: the checks of package ports are the adapters' own.
func runValidate(t *testing.T, newBackend NewBackendFunc) {
	t.Helper()

	group(t, "Validate", map[string]func(t *testing.T){
		"RejectsInvalidParamsChangingNothing": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			events := appendN(t, tb.backend, stream, at(0), eventType, 2)
			a.heartbeat(t, at(0))
			require.Equal(t, []uuid.UUID{stream}, a.claim(t, at(0)))
			before := fingerprint(t, tb.backend, stream, events)

			for _, c := range invalidCalls(a.id, stream, events) {
				t.Run(c.name, func(t *testing.T) {
					if !hasPort(tb.backend, c.port) {
						t.Skip("adapter does not implement ports." + c.port)
					}
					require.ErrorIs(t, c.call(t, tb.backend), ports.ErrInvalidArgument, "an invalid %s is rejected", c.name)
					require.Equal(t, before, fingerprint(t, tb.backend, stream, events), "a rejected %s changes nothing", c.name)
				})
			}
			// The rejected registration recorded none of its subscriptions.
			other := newID(t)
			appendN(t, tb.backend, other, at(2*time.Second), eventType, 1)
			res := a.fetch(t, at(2*time.Second), other)
			require.Len(t, res.Work, 1, "only %q applies the event", perspective)
			require.Equal(t, perspective, res.Work[0].Perspective)
		},
	})
}

// invalidCalls lists one call per check of a params Validate method, each
// valid but for the field it is named after.
func invalidCalls(instanceID, stream uuid.UUID, events []ports.Event) []invalidCall {
	heartbeat := func(mod func(p *ports.InstanceHeartbeatParams)) func(t *testing.T, b ports.Backend) error {
		return func(t *testing.T, b ports.Backend) error {
			p := ports.InstanceHeartbeatParams{InstanceID: instanceID, StaleThreshold: staleThreshold, Now: at(time.Second)}
			mod(&p)
			_, err := b.Claimer.InstanceHeartbeat(t.Context(), &p)
			return err
		}
	}
	claim := func(mod func(p *ports.WorkClaimParams)) func(t *testing.T, b ports.Backend) error {
		return func(t *testing.T, b ports.Backend) error {
			p := ports.WorkClaimParams{InstanceID: instanceID, MaxStreams: 10, LeaseDuration: leaseDuration, StaleThreshold: staleThreshold, Now: at(time.Second)}
			mod(&p)
			_, err := b.Claimer.WorkClaim(t.Context(), &p)
			return err
		}
	}
	fetch := func(mod func(p *ports.EventsFetchPendingParams)) func(t *testing.T, b ports.Backend) error {
		return func(t *testing.T, b ports.Backend) error {
			p := ports.EventsFetchPendingParams{InstanceID: instanceID, StreamIDs: []uuid.UUID{stream}, LeaseDuration: leaseDuration, StaleThreshold: staleThreshold, Now: at(time.Second)}
			mod(&p)
			_, err := b.Fetcher.EventsFetchPending(t.Context(), &p)
			return err
		}
	}
	complete := func(mod func(c *ports.Completion)) func(t *testing.T, b ports.Backend) error {
		return func(t *testing.T, b ports.Backend) error {
			c := ports.Completion{StreamID: stream, Perspective: perspective, LastEventID: events[1].ID, LastVersion: 2}
			mod(&c)
			_, err := b.Cursors.WorkComplete(t.Context(), &ports.WorkCompleteParams{InstanceID: instanceID, Completions: []ports.Completion{c}, Now: at(time.Second)})
			return err
		}
	}
	fail := func(mod func(f *ports.Failure)) func(t *testing.T, b ports.Backend) error {
		return func(t *testing.T, b ports.Backend) error {
			f := ports.Failure{StreamID: stream, Perspective: perspective, Error: "boom", RetryAt: at(time.Minute)}
			mod(&f)
			return b.Cursors.WorkFail(t.Context(), &ports.WorkFailParams{InstanceID: instanceID, Failures: []ports.Failure{f}, Now: at(time.Second)})
		}
	}
	save := func(mod func(p *ports.ModelSaveParams)) func(t *testing.T, b ports.Backend) error {
		return func(t *testing.T, b ports.Backend) error {
			p := ports.ModelSaveParams{StreamID: stream, Perspective: perspective, Data: []byte(`{}`), LastEventID: events[0].ID, LastVersion: 1, Now: at(time.Second)}
			mod(&p)
			return b.Models.ModelSave(t.Context(), &p)
		}
	}
	lifecycleClaim := func(mod func(p *ports.LifecycleClaimParams)) func(t *testing.T, b ports.Backend) error {
		return func(t *testing.T, b ports.Backend) error {
			p := ports.LifecycleClaimParams{EventIDs: []uuid.UUID{events[0].ID}, Stage: ports.StagePrePerspective, InstanceID: instanceID, StaleThreshold: staleThreshold, Now: at(time.Second)}
			mod(&p)
			_, err := b.Lifecycle.LifecycleClaim(t.Context(), &p)
			return err
		}
	}
	lock := func(mod func(p *ports.StreamLockParams)) ports.StreamLockParams {
		p := ports.StreamLockParams{StreamID: stream, Perspective: perspective, InstanceID: instanceID, Reason: "rewind", Duration: time.Minute, Now: at(time.Second)}
		mod(&p)
		return p
	}
	snapshot := func(mod func(s *ports.Snapshot)) func(t *testing.T, b ports.Backend) error {
		return func(t *testing.T, b ports.Backend) error {
			s := ports.Snapshot{StreamID: stream, Perspective: perspective, Version: 1, EventID: events[0].ID, Data: []byte(`{}`), CreatedAt: at(time.Second)}
			mod(&s)
			return b.Snapshots.SnapshotSave(t.Context(), &ports.SnapshotSaveParams{Snapshot: s})
		}
	}
	rebuildClaim := func(mod func(p *ports.RebuildClaimParams)) func(t *testing.T, b ports.Backend) error {
		return func(t *testing.T, b ports.Backend) error {
			p := ports.RebuildClaimParams{InstanceID: instanceID, Perspectives: []string{perspective}, ClaimDuration: time.Minute, Now: at(time.Second)}
			mod(&p)
			_, err := b.Rebuilds.RebuildClaim(t.Context(), &p)
			return err
		}
	}
	rebuildProgress := func(mod func(p *ports.RebuildProgressParams)) func(t *testing.T, b ports.Backend) error {
		return func(t *testing.T, b ports.Backend) error {
			p := ports.RebuildProgressParams{ID: stream, InstanceID: instanceID, Attempt: 1, ClaimDuration: time.Minute, Now: at(time.Second)}
			mod(&p)
			return b.Rebuilds.RebuildProgress(t.Context(), &p)
		}
	}
	return []invalidCall{
		{name: "InstanceHeartbeatParams.InstanceID", call: heartbeat(func(p *ports.InstanceHeartbeatParams) { p.InstanceID = uuid.Nil })},
		{name: "InstanceHeartbeatParams.StaleThreshold", call: heartbeat(func(p *ports.InstanceHeartbeatParams) { p.StaleThreshold = 0 })},
		{name: "WorkClaimParams.InstanceID", call: claim(func(p *ports.WorkClaimParams) { p.InstanceID = uuid.Nil })},
		{name: "WorkClaimParams.MaxStreams", call: claim(func(p *ports.WorkClaimParams) { p.MaxStreams = 0 })},
		{name: "WorkClaimParams.LeaseDuration", call: claim(func(p *ports.WorkClaimParams) { p.LeaseDuration = 0 })},
		{name: "WorkClaimParams.StaleThreshold", call: claim(func(p *ports.WorkClaimParams) { p.StaleThreshold = -time.Second })},
		{name: "WorkRenewLeasesParams.LeaseDuration", call: func(t *testing.T, b ports.Backend) error {
			_, err := b.Claimer.WorkRenewLeases(t.Context(), &ports.WorkRenewLeasesParams{InstanceID: instanceID, StreamIDs: []uuid.UUID{newID(t)}, Now: at(time.Second)})
			return err
		}},
		{name: "EventsFetchPendingParams.InstanceID", call: fetch(func(p *ports.EventsFetchPendingParams) { p.InstanceID = uuid.Nil })},
		{name: "EventsFetchPendingParams.LeaseDuration", call: fetch(func(p *ports.EventsFetchPendingParams) { p.LeaseDuration = 0 })},
		{name: "EventsFetchPendingParams.StaleThreshold", call: fetch(func(p *ports.EventsFetchPendingParams) { p.StaleThreshold = 0 })},
		{name: "EventsFetchPendingParams.MaxRows", call: fetch(func(p *ports.EventsFetchPendingParams) { p.MaxRows = -1 })},
		{name: "EventsReadStreamParams.StreamID", call: func(t *testing.T, b ports.Backend) error {
			_, err := b.Fetcher.EventsReadStream(t.Context(), &ports.EventsReadStreamParams{})
			return err
		}},
		{name: "EventsReadStreamParams.Limit", call: func(t *testing.T, b ports.Backend) error {
			_, err := b.Fetcher.EventsReadStream(t.Context(), &ports.EventsReadStreamParams{StreamID: stream, Limit: -1})
			return err
		}},
		{name: "WorkCompleteParams.Completions.StreamID", call: complete(func(c *ports.Completion) { c.StreamID = uuid.Nil })},
		{name: "WorkCompleteParams.Completions.Perspective", call: complete(func(c *ports.Completion) { c.Perspective = "" })},
		{name: "WorkCompleteParams.Completions.LastVersion", call: complete(func(c *ports.Completion) { c.LastVersion = -1 })},
		{name: "WorkFailParams.Failures.StreamID", call: fail(func(f *ports.Failure) { f.StreamID = uuid.Nil })},
		{name: "WorkFailParams.Failures.Perspective", call: fail(func(f *ports.Failure) { f.Perspective = "" })},
		{name: "WorkFailParams.Failures.FailedEventVersion", call: fail(func(f *ports.Failure) { f.FailedEventID = events[0].ID })},
		{name: "WorkFailParams.Failures.FailedEventID", call: fail(func(f *ports.Failure) { f.FailedEventVersion = 1 })},
		{name: "WorkFailParams.Failures.Attempt", call: fail(func(f *ports.Failure) { f.Attempt = -1 })},
		{name: "DeadLettersListParams.Limit", call: func(t *testing.T, b ports.Backend) error {
			_, err := b.DeadLetters.DeadLettersList(t.Context(), &ports.DeadLettersListParams{Limit: -1})
			return err
		}},
		{name: "DeadLettersListParams.Status", call: func(t *testing.T, b ports.Backend) error {
			_, err := b.DeadLetters.DeadLettersList(t.Context(), &ports.DeadLettersListParams{Status: "lost"})
			return err
		}},
		{name: "DeadLettersRecoverParams.Generation", call: func(t *testing.T, b ports.Backend) error {
			_, err := b.DeadLetters.DeadLettersRecover(t.Context(), &ports.DeadLettersRecoverParams{Limit: 10, Now: at(time.Second)})
			return err
		}},
		{name: "DeadLettersRecoverParams.Limit", call: func(t *testing.T, b ports.Backend) error {
			_, err := b.DeadLetters.DeadLettersRecover(t.Context(), &ports.DeadLettersRecoverParams{Generation: gen2, Now: at(time.Second)})
			return err
		}},
		{name: "EventsAppendParams.Subscriptions", call: func(t *testing.T, b ports.Backend) error {
			_, err := b.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{
				StreamID: stream, Events: []ports.NewEvent{newEvent(eventType, 0)},
				Subscriptions: []ports.Subscription{{EventType: eventType}}, Now: at(time.Second),
			})
			return err
		}},
		{name: "SubscriptionsRegisterParams.Subscriptions", call: func(t *testing.T, b ports.Backend) error {
			return b.Events.SubscriptionsRegister(t.Context(), &ports.SubscriptionsRegisterParams{
				Subscriptions: []ports.Subscription{{EventType: eventType, Perspective: perspective2}, {Perspective: perspective2}},
			})
		}},
		{name: "ModelSaveParams.StreamID", call: save(func(p *ports.ModelSaveParams) { p.StreamID = uuid.Nil })},
		{name: "ModelSaveParams.Perspective", call: save(func(p *ports.ModelSaveParams) { p.Perspective = "" })},
		{name: "ModelSaveParams.ExpectedVersion", call: save(func(p *ports.ModelSaveParams) { p.ExpectedVersion = -1 })},
		{name: "ModelSaveParams.ExpectedEpoch", call: save(func(p *ports.ModelSaveParams) { p.ExpectedEpoch = -1 })},
		{name: "ModelSaveParams.Data", call: save(func(p *ports.ModelSaveParams) { p.Data = []byte(`{`) })},
		{name: "LifecycleClaimParams.Stage", port: "Lifecycle", call: lifecycleClaim(func(p *ports.LifecycleClaimParams) {
			p.Stage = ports.StagePrePerspective | ports.StagePostLifecycle
		})},
		{name: "LifecycleClaimParams.Perspective", port: "Lifecycle", call: lifecycleClaim(func(p *ports.LifecycleClaimParams) { p.Stage = ports.StagePostPerspective })},
		{name: "LifecycleClaimParams.InstanceID", port: "Lifecycle", call: lifecycleClaim(func(p *ports.LifecycleClaimParams) { p.InstanceID = uuid.Nil })},
		{name: "LifecycleClaimParams.EventIDs", port: "Lifecycle", call: lifecycleClaim(func(p *ports.LifecycleClaimParams) { p.EventIDs = append(p.EventIDs, uuid.Nil) })},
		{name: "LifecycleClaimParams.StaleThreshold", port: "Lifecycle", call: lifecycleClaim(func(p *ports.LifecycleClaimParams) { p.StaleThreshold = 0 })},
		{name: "LifecycleCompleteParams.Perspective", port: "Lifecycle", call: func(t *testing.T, b ports.Backend) error {
			return b.Lifecycle.LifecycleComplete(t.Context(), &ports.LifecycleCompleteParams{
				EventIDs: []uuid.UUID{events[0].ID}, Stage: ports.StagePostLifecycle, Perspective: perspective, InstanceID: instanceID, Now: at(time.Second),
			})
		}},
		{name: "LifecycleOrphansParams.Limit", port: "Lifecycle", call: func(t *testing.T, b ports.Backend) error {
			_, err := b.Lifecycle.LifecycleOrphans(t.Context(), &ports.LifecycleOrphansParams{Expected: map[string][]string{eventType: {perspective}}, Limit: -1})
			return err
		}},
		{name: "CursorsRewindRequiredParams.Limit", port: "Rewind", call: func(t *testing.T, b ports.Backend) error {
			_, err := b.Rewind.CursorsRewindRequired(t.Context(), &ports.CursorsRewindRequiredParams{Limit: -1})
			return err
		}},
		{name: "StreamLockParams.Duration", port: "Rewind", call: func(t *testing.T, b ports.Backend) error {
			p := lock(func(p *ports.StreamLockParams) { p.Duration = 0 })
			_, err := b.Rewind.StreamLockAcquire(t.Context(), &p)
			return err
		}},
		{name: "StreamLockParams.Perspective", port: "Rewind", call: func(t *testing.T, b ports.Backend) error {
			p := lock(func(p *ports.StreamLockParams) { p.Perspective = "" })
			_, err := b.Rewind.StreamLockAcquire(t.Context(), &p)
			return err
		}},
		{name: "StreamLockParams.InstanceID", port: "Rewind", call: func(t *testing.T, b ports.Backend) error {
			p := lock(func(p *ports.StreamLockParams) { p.InstanceID = uuid.Nil })
			return b.Rewind.StreamLockRelease(t.Context(), &p)
		}},
		{name: "StreamsWithEventTypesParams.Limit", port: "Rewind", call: func(t *testing.T, b ports.Backend) error {
			_, err := b.Rewind.StreamsWithEventTypes(t.Context(), &ports.StreamsWithEventTypesParams{EventTypes: []string{eventType}, Limit: -1})
			return err
		}},
		{name: "SnapshotSaveParams.Snapshot.Version", port: "Snapshots", call: snapshot(func(s *ports.Snapshot) { s.Version = 0 })},
		{name: "SnapshotSaveParams.Snapshot.EventID", port: "Snapshots", call: snapshot(func(s *ports.Snapshot) { s.EventID = uuid.Nil })},
		{name: "SnapshotSaveParams.Snapshot.Epoch", port: "Snapshots", call: snapshot(func(s *ports.Snapshot) { s.Epoch = -1 })},
		{name: "SnapshotSaveParams.Snapshot.Data", port: "Snapshots", call: snapshot(func(s *ports.Snapshot) { s.Data = nil })},
		{name: "DeadLettersRequeueParams.IDs", port: "Admin", call: func(t *testing.T, b ports.Backend) error {
			_, err := b.Admin.DeadLettersRequeue(t.Context(), &ports.DeadLettersRequeueParams{Perspective: perspective, IDs: []uuid.UUID{uuid.Nil}, Now: at(time.Second)})
			return err
		}},
		{name: "DeadLettersRequeueParams.Perspective", port: "Admin", call: func(t *testing.T, b ports.Backend) error {
			_, err := b.Admin.DeadLettersRequeue(t.Context(), &ports.DeadLettersRequeueParams{Generation: gen2, Now: at(time.Second)})
			return err
		}},
		{name: "RebuildRequestParams.Perspective", port: "Rebuilds", call: func(t *testing.T, b ports.Backend) error {
			_, err := b.Admin.RebuildRequest(t.Context(), &ports.RebuildRequestParams{StreamIDs: []uuid.UUID{stream}, Now: at(time.Second)})
			return err
		}},
		{name: "RebuildRequestParams.StreamIDs", port: "Rebuilds", call: func(t *testing.T, b ports.Backend) error {
			_, err := b.Admin.RebuildRequest(t.Context(), &ports.RebuildRequestParams{Perspective: perspective, StreamIDs: []uuid.UUID{stream, uuid.Nil}, Now: at(time.Second)})
			return err
		}},
		{name: "RebuildsListParams.Limit", port: "Rebuilds", call: func(t *testing.T, b ports.Backend) error {
			_, err := b.Admin.RebuildsList(t.Context(), &ports.RebuildsListParams{Limit: -1})
			return err
		}},
		{name: "RebuildsListParams.Status", port: "Rebuilds", call: func(t *testing.T, b ports.Backend) error {
			_, err := b.Admin.RebuildsList(t.Context(), &ports.RebuildsListParams{Status: "paused"})
			return err
		}},
		{name: "RebuildClaimParams.InstanceID", port: "Rebuilds", call: rebuildClaim(func(p *ports.RebuildClaimParams) { p.InstanceID = uuid.Nil })},
		{name: "RebuildClaimParams.Perspectives", port: "Rebuilds", call: rebuildClaim(func(p *ports.RebuildClaimParams) { p.Perspectives = append(p.Perspectives, "") })},
		{name: "RebuildClaimParams.ClaimDuration", port: "Rebuilds", call: rebuildClaim(func(p *ports.RebuildClaimParams) { p.ClaimDuration = 0 })},
		{name: "RebuildProgressParams.ID", port: "Rebuilds", call: rebuildProgress(func(p *ports.RebuildProgressParams) { p.ID = uuid.Nil })},
		{name: "RebuildProgressParams.InstanceID", port: "Rebuilds", call: rebuildProgress(func(p *ports.RebuildProgressParams) { p.InstanceID = uuid.Nil })},
		{name: "RebuildProgressParams.Attempt", port: "Rebuilds", call: rebuildProgress(func(p *ports.RebuildProgressParams) { p.Attempt = 0 })},
		{name: "RebuildProgressParams.StreamsDone", port: "Rebuilds", call: rebuildProgress(func(p *ports.RebuildProgressParams) { p.StreamsDone = -1 })},
		{name: "RebuildProgressParams.ClaimDuration", port: "Rebuilds", call: rebuildProgress(func(p *ports.RebuildProgressParams) { p.ClaimDuration = 0 })},
		{name: "RebuildFinishParams.Attempt", port: "Rebuilds", call: func(t *testing.T, b ports.Backend) error {
			return b.Rebuilds.RebuildFinish(t.Context(), &ports.RebuildFinishParams{ID: stream, InstanceID: instanceID, Now: at(time.Second)})
		}},
		{name: "PerspectiveRetireParams.Perspective", port: "Admin", call: func(t *testing.T, b ports.Backend) error {
			_, err := b.Admin.PerspectiveRetire(t.Context(), &ports.PerspectiveRetireParams{DropState: true})
			return err
		}},
	}
}

// hasPort reports whether b implements the optional port named port (true
// for the empty name of the required ports).
func hasPort(b ports.Backend, port string) bool {
	switch port {
	case "Lifecycle":
		return b.Lifecycle != nil
	case "Rewind":
		return b.Rewind != nil
	case "Snapshots":
		return b.Snapshots != nil
	case "Admin":
		return b.Admin != nil
	case "Rebuilds":
		return b.Admin != nil && b.Rebuilds != nil
	}
	return true
}

// state is what an invalid call must leave as it was.
type state struct {
	Events      []ports.Event
	Cursors     []ports.Cursor
	DeadLetters []ports.DeadLetter
	Stages      map[uuid.UUID]ports.LifecycleStage
	Rewinds     []ports.Cursor
	Snapshot    ports.Snapshot
	Instances   []ports.Instance
	Retired     []string
	Rebuilds    []ports.RebuildRequest
}

// fingerprint reads, through every port the adapter implements, the state
// an invalid call could have changed.
func fingerprint(t *testing.T, b ports.Backend, stream uuid.UUID, events []ports.Event) state {
	t.Helper()
	var s state
	var err error
	s.Events, err = b.Fetcher.EventsReadStream(t.Context(), &ports.EventsReadStreamParams{StreamID: stream})
	require.NoError(t, err)
	s.Cursors, err = b.Cursors.CursorsGet(t.Context(), &ports.CursorsGetParams{StreamIDs: []uuid.UUID{stream}})
	require.NoError(t, err)
	s.DeadLetters, err = b.DeadLetters.DeadLettersList(t.Context(), &ports.DeadLettersListParams{})
	require.NoError(t, err)
	if b.Lifecycle != nil {
		s.Stages, err = b.Lifecycle.LifecycleStages(t.Context(), &ports.LifecycleStagesParams{EventIDs: []uuid.UUID{events[0].ID, events[1].ID}})
		require.NoError(t, err)
	}
	if b.Rewind != nil {
		s.Rewinds, err = b.Rewind.CursorsRewindRequired(t.Context(), &ports.CursorsRewindRequiredParams{})
		require.NoError(t, err)
	}
	if b.Snapshots != nil {
		s.Snapshot, err = b.Snapshots.SnapshotLatestBefore(t.Context(), &ports.SnapshotLatestBeforeParams{StreamID: stream, Perspective: perspective, Version: 100})
		if !errors.Is(err, ports.ErrNotFound) {
			require.NoError(t, err)
		}
	}
	if b.Admin != nil {
		s.Instances, err = b.Admin.InstancesList(t.Context())
		require.NoError(t, err)
		s.Retired, err = b.Admin.PerspectivesRetired(t.Context())
		require.NoError(t, err)
	}
	if hasPort(b, "Rebuilds") {
		s.Rebuilds, err = b.Admin.RebuildsList(t.Context(), &ports.RebuildsListParams{})
		require.NoError(t, err)
	}
	return s
}
