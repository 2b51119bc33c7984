package core

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// workBackend is a single-instance backend for the batch tests, on ports
// only: appends fan out work rows, claims list the streams with pending
// rows, fetches return them in port order, completions delete them, models
// and cursors are kept per pair. It has no leases, pins or liveness (one
// instance), no rewinds and no dead letters; the conformance suite covers
// those on the real adapters.
type workBackend struct {
	mu      sync.Mutex
	subs    map[string][]string // event type -> perspectives
	events  map[uuid.UUID][]ports.Event
	work    []*workRow
	cursors map[pairKey]ports.Cursor
	models  map[pairKey]ports.StoredModel
}

type workRow struct {
	item    ports.WorkItem
	retryAt time.Time
}

func newWorkBackend() ports.Backend {
	b := &workBackend{
		subs:    map[string][]string{},
		events:  map[uuid.UUID][]ports.Event{},
		cursors: map[pairKey]ports.Cursor{},
		models:  map[pairKey]ports.StoredModel{},
	}
	return ports.Backend{Claimer: b, Fetcher: b, Cursors: b, Notifier: b, DeadLetters: b, Events: b, Models: b}
}

func nowOr(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}

func (b *workBackend) SubscriptionsRegister(_ context.Context, params *ports.SubscriptionsRegisterParams) error {
	subs := params.Subscriptions
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range subs {
		if !slices.Contains(b.subs[s.EventType], s.Perspective) {
			b.subs[s.EventType] = append(b.subs[s.EventType], s.Perspective)
		}
	}
	return nil
}

func (b *workBackend) EventsAppend(_ context.Context, p *ports.EventsAppendParams) (*ports.EventsAppendResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	res := &ports.EventsAppendResult{}
	for _, ne := range p.Events {
		e := ports.Event{ID: uuid.New(), StreamID: p.StreamID, Type: ne.Type, Version: int64(len(b.events[p.StreamID]) + 1),
			Data: ne.Data, Metadata: ne.Metadata.Clone(), CreatedAt: nowOr(p.Now)}
		b.events[p.StreamID] = append(b.events[p.StreamID], e)
		res.Events = append(res.Events, e)
		for _, name := range b.subs[e.Type] {
			b.work = append(b.work, &workRow{item: ports.WorkItem{WorkID: uuid.New(), StreamID: e.StreamID,
				Perspective: name, EventID: e.ID, EventVersion: e.Version}})
			res.WorkRows++
		}
	}
	return res, nil
}

func (b *workBackend) InstanceHeartbeat(context.Context, *ports.InstanceHeartbeatParams) (*ports.InstanceHeartbeatResult, error) {
	return &ports.InstanceHeartbeatResult{}, nil
}

func (b *workBackend) InstanceDeregister(context.Context, *ports.InstanceDeregisterParams) error {
	return nil
}

func (b *workBackend) InstancesList(context.Context) ([]ports.Instance, error) { return nil, nil }

func (b *workBackend) WorkClaim(_ context.Context, p *ports.WorkClaimParams) (*ports.WorkClaimResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var streams []uuid.UUID
	for _, r := range b.work {
		if !slices.Contains(streams, r.item.StreamID) {
			streams = append(streams, r.item.StreamID)
		}
	}
	res := &ports.WorkClaimResult{StreamIDs: streams, HasMore: len(streams) > p.MaxStreams}
	if res.HasMore {
		res.StreamIDs = streams[:p.MaxStreams]
	}
	return res, nil
}

func (b *workBackend) WorkRenewLeases(context.Context, *ports.WorkRenewLeasesParams) (int, error) {
	return 0, nil
}

// EventsFetchPending returns, per pair of the given streams, the pending
// rows up to the first one scheduled for later, ordered by stream id bytes,
// perspective and version, at most MaxRows, with their events.
func (b *workBackend) EventsFetchPending(_ context.Context, p *ports.EventsFetchPendingParams) (*ports.EventsFetchPendingResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := nowOr(p.Now)
	var rows []ports.WorkItem
	blocked := map[pairKey]bool{}
	for _, r := range b.sortedWork() {
		k := pairKey{stream: r.item.StreamID, perspective: r.item.Perspective}
		if !slices.Contains(p.StreamIDs, k.stream) || blocked[k] {
			continue
		}
		if r.retryAt.After(now) {
			blocked[k] = true
			continue
		}
		rows = append(rows, r.item)
	}
	if p.MaxRows > 0 && len(rows) > p.MaxRows {
		rows = rows[:p.MaxRows]
	}
	res := &ports.EventsFetchPendingResult{Work: rows}
	seen := map[pairKey]bool{}
	for _, r := range rows {
		k := pairKey{stream: r.StreamID, perspective: r.Perspective}
		if c, ok := b.cursors[k]; ok && !seen[k] {
			res.Cursors = append(res.Cursors, c)
		}
		seen[k] = true
		e := b.events[r.StreamID][r.EventVersion-1]
		if !slices.ContainsFunc(res.Events, func(x ports.Event) bool { return x.ID == e.ID }) {
			res.Events = append(res.Events, e)
		}
	}
	slices.SortFunc(res.Events, compareEvents)
	return res, nil
}

func (b *workBackend) sortedWork() []*workRow {
	out := slices.Clone(b.work)
	slices.SortFunc(out, func(x, y *workRow) int { return compareWork(x.item, y.item) })
	return out
}

func (b *workBackend) EventsReadStream(_ context.Context, p *ports.EventsReadStreamParams) ([]ports.Event, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []ports.Event
	for _, e := range b.events[p.StreamID] {
		if e.Version > p.AfterVersion && (p.Limit == 0 || len(out) < p.Limit) {
			out = append(out, e)
		}
	}
	return out, nil
}

func (b *workBackend) CursorsGet(_ context.Context, p *ports.CursorsGetParams) ([]ports.Cursor, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []ports.Cursor
	for k, c := range b.cursors {
		if slices.Contains(p.StreamIDs, k.stream) && (p.Perspective == "" || p.Perspective == k.perspective) {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(x, y ports.Cursor) int { return bytes.Compare(x.StreamID[:], y.StreamID[:]) })
	return out, nil
}

// finish deletes the listed pending rows of the pair and moves its cursor
// forward; it returns how many rows it deleted.
func (b *workBackend) finish(k pairKey, ids []uuid.UUID, lastID uuid.UUID, lastVersion int64, status ports.CursorStatus) int {
	n := len(b.work)
	b.work = slices.DeleteFunc(b.work, func(r *workRow) bool {
		return r.item.StreamID == k.stream && r.item.Perspective == k.perspective && slices.Contains(ids, r.item.WorkID)
	})
	c := b.cursors[k]
	c.StreamID, c.Perspective, c.Status = k.stream, k.perspective, status
	if lastVersion > c.LastVersion {
		c.LastEventID, c.LastVersion = lastID, lastVersion
	}
	b.cursors[k] = c
	return n - len(b.work)
}

func (b *workBackend) WorkComplete(_ context.Context, p *ports.WorkCompleteParams) (*ports.WorkCompleteResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	res := &ports.WorkCompleteResult{}
	for _, c := range p.Completions {
		res.Completed += b.finish(pairKey{stream: c.StreamID, perspective: c.Perspective}, c.WorkIDs, c.LastEventID, c.LastVersion, ports.CursorCompleted)
	}
	return res, nil
}

func (b *workBackend) WorkFail(_ context.Context, p *ports.WorkFailParams) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, f := range p.Failures {
		b.finish(pairKey{stream: f.StreamID, perspective: f.Perspective}, f.AppliedWorkIDs, f.LastEventID, f.LastVersion, ports.CursorFailed)
		for _, r := range b.work {
			if slices.Contains(f.FailedWorkIDs, r.item.WorkID) {
				r.retryAt = f.RetryAt
				r.item.Attempts++
			}
		}
	}
	return nil
}

func (b *workBackend) NotifierListen(ctx context.Context) (<-chan ports.Wake, error) {
	ch := make(chan ports.Wake, 1)
	go func() { <-ctx.Done(); close(ch) }()
	return ch, nil
}

func (b *workBackend) NotifierPublish(context.Context) error { return nil }

func (b *workBackend) NotifierHealthy() bool { return false }

func (b *workBackend) DeadLetterMove(context.Context, *ports.DeadLetterMoveParams) (*ports.DeadLetterMoveResult, error) {
	return &ports.DeadLetterMoveResult{}, nil
}

func (b *workBackend) DeadLettersList(context.Context, *ports.DeadLettersListParams) ([]ports.DeadLetter, error) {
	return nil, nil
}

func (b *workBackend) DeadLetterRequeue(context.Context, *ports.DeadLetterRequeueParams) error {
	return ports.ErrNotFound
}

func (b *workBackend) DeadLetterIgnore(context.Context, *ports.DeadLetterIgnoreParams) error {
	return ports.ErrNotFound
}

func (b *workBackend) DeadLettersRecover(context.Context, *ports.DeadLettersRecoverParams) ([]ports.DeadLetter, error) {
	return nil, nil
}

func (b *workBackend) ModelLoad(_ context.Context, params *ports.ModelLoadParams) (ports.StoredModel, error) {
	stream, perspective := params.StreamID, params.Perspective
	b.mu.Lock()
	defer b.mu.Unlock()
	m, ok := b.models[pairKey{stream: stream, perspective: perspective}]
	if !ok {
		return ports.StoredModel{}, ports.ErrNotFound
	}
	return m, nil
}

func (b *workBackend) ModelSave(_ context.Context, p *ports.ModelSaveParams) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := pairKey{stream: p.StreamID, perspective: p.Perspective}
	c := b.cursors[k]
	if c.LastVersion != p.ExpectedVersion {
		return ports.ErrVersionConflict
	}
	c.StreamID, c.Perspective, c.LastEventID, c.LastVersion = k.stream, k.perspective, p.LastEventID, p.LastVersion
	b.cursors[k] = c
	b.models[k] = ports.StoredModel{StreamID: k.stream, Perspective: k.perspective, Data: slices.Clone(p.Data),
		LastEventID: p.LastEventID, LastVersion: p.LastVersion, UpdatedAt: nowOr(p.Now)}
	return nil
}
