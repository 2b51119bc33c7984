package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// pairKey names one (stream, perspective).
type pairKey struct {
	streamID    uuid.UUID
	perspective string
}

// CursorsGet implements ports.CursorStore. Cursors come back ordered by
// stream id, then perspective.
func (s *Store) CursorsGet(ctx context.Context, params *ports.CursorsGetParams) ([]ports.Cursor, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	var out []ports.Cursor
	for _, id := range uniqueSorted(params.StreamIDs) {
		st := s.streams[id]
		if st == nil {
			continue
		}
		if params.Perspective != "" {
			if cur := st.cursors[params.Perspective]; cur != nil {
				out = append(out, *cur)
			}
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(st.cursors)) {
			out = append(out, *st.cursors[name])
		}
	}
	return out, nil
}

// completeCursor applies completion c to cur at now: the position moves
// forward only, the status becomes exactly Completed, the error and the
// rewind columns are cleared. A cursor that is so already (the save of the
// completed events moved it) is left as it is, UpdatedAt included.
func completeCursor(cur *ports.Cursor, c ports.Completion, now time.Time) {
	if c.LastVersion <= cur.LastVersion && cur.Status == ports.CursorCompleted && cur.Error == "" &&
		cur.RewindTriggerEventID == uuid.Nil && cur.RewindTriggerVersion == 0 &&
		cur.RewindFlaggedAt.IsZero() && cur.RewindFirstFlaggedAt.IsZero() {
		return
	}
	if c.LastVersion > cur.LastVersion {
		cur.LastEventID, cur.LastVersion = c.LastEventID, c.LastVersion
	}
	cur.Status = ports.CursorCompleted
	cur.Error = ""
	cur.RewindTriggerEventID, cur.RewindTriggerVersion = uuid.Nil, 0
	cur.RewindFlaggedAt, cur.RewindFirstFlaggedAt = time.Time{}, time.Time{}
	cur.UpdatedAt = now
}

// WorkComplete implements ports.CursorStore. A completion's rows count only
// when they belong to its (stream, perspective) and are pending, and the
// caller holds the stream's lease, whether or not it has expired since
// (nobody took the stream). The same pair may appear in several completions of one call; its
// cursor then ends at the highest position. Rows completed in DebugMode stay
// in memory, invisible to every port, for the life of the store. A completed
// row that DeadLetterRequeue stored, in DebugMode too, marks its dead letter
// recovered. It returns ports.ErrInvalidArgument, and changes nothing, when
// a completion has a nil stream id, an empty perspective or a negative
// LastVersion.
func (s *Store) WorkComplete(ctx context.Context, params *ports.WorkCompleteParams) (*ports.WorkCompleteResult, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("completing work: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	now := s.now(params.Now)
	result := &ports.WorkCompleteResult{}
	// Every deletion of the call happens before any cursor is examined, so a
	// row completed by a later entry of the call is never seen as a straggler.
	for _, c := range params.Completions {
		result.Completed += s.finishRows(params.InstanceID, c.StreamID, c.Perspective, c.WorkIDs, params.DebugMode, now)
	}
	var pairs []pairKey // distinct, in first-seen order
	reported := map[pairKey]int64{}
	for _, c := range params.Completions {
		st := s.streamFor(c.StreamID)
		cur := s.reportedCursor(st, c.Perspective, now)
		if cur == nil {
			continue
		}
		completeCursor(cur, c, now)
		k := pairKey{c.StreamID, c.Perspective}
		if _, seen := reported[k]; !seen {
			pairs = append(pairs, k)
		}
		reported[k] = max(reported[k], c.LastVersion)
	}
	listed := listedRows(params.Completions, func(c ports.Completion) []uuid.UUID { return c.WorkIDs })
	for _, k := range pairs {
		if s.flagStragglers(k, reported[k], listed, now) {
			result.RewindsFlagged++
		}
		st := s.streams[k.streamID]
		s.releaseIfDrained(st)
		s.touch(st, now)
	}
	return result, nil
}

// WorkFail implements ports.CursorStore. Applied rows complete as in
// WorkComplete. Failed rows must belong to the failure's (stream,
// perspective), and the caller must hold the stream's lease; they end with
// at least the failure's Attempt attempts when it is set, else gain an
// attempt when handed out (at or below the pair's mark), keep Error and
// are scheduled at RetryAt (a zero RetryAt makes
// them drainable at once), and the pair's handed-out mark drops below them.
// The lease stays the caller's. A FailedEventID is charged to the pair's
// pending row of that event, whoever holds the stream, as to a failed row;
// without one, a new pending row is stored for it, marked as a replay's,
// with one attempt, the error and RetryAt. Either way the marks are left as they are: the event
// was applied long ago, and a replay's failure says nothing of the rows a
// holder is applying.
//
// The cursor is upserted: its position moves forward to LastVersion when that
// is higher, Completed is replaced by Failed and Error is stored (unless the
// report is stale: the cursor is past LastVersion, or the caller does not
// hold the stream and the failure names no event). When the
// position moved, pending rows below it become late and flag RewindRequired
// as in WorkComplete, and a FailedEventID below the position makes its row
// late and flags it too, keeping an earlier trigger; rewind columns are
// otherwise left alone. Streams left without pending rows are released. It
// returns ports.ErrInvalidArgument, and changes nothing, when a failure has a
// nil stream id, an empty perspective, a negative LastVersion, or a
// FailedEventID that is not the stored event of FailedEventVersion in the
// stream.
func (s *Store) WorkFail(ctx context.Context, params *ports.WorkFailParams) error {
	if err := params.Validate(); err != nil {
		return fmt.Errorf("recording failures: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()

	// Check the failed events, and draw the ids of the rows they may need,
	// before changing anything: the call is atomic.
	var eventRowIDs []uuid.UUID // by failure index, for failures naming an event
	for i, f := range params.Failures {
		if f.FailedEventID == uuid.Nil {
			continue
		}
		if !s.streams[f.StreamID].storesEvent(f.FailedEventID, f.FailedEventVersion) {
			return fmt.Errorf("recording failures: event %s is not version %d of stream %s: %w",
				f.FailedEventID, f.FailedEventVersion, f.StreamID, ports.ErrInvalidArgument)
		}
		id, err := s.work.newID()
		if err != nil {
			return fmt.Errorf("recording failures: generating work id: %w", err)
		}
		if eventRowIDs == nil {
			eventRowIDs = make([]uuid.UUID, len(params.Failures))
		}
		eventRowIDs[i] = id
	}

	now := s.now(params.Now)
	for _, f := range params.Failures {
		s.finishRows(params.InstanceID, f.StreamID, f.Perspective, f.AppliedWorkIDs, params.DebugMode, now)
	}
	var moved []pairKey // distinct, in first-seen order
	reported := map[pairKey]int64{}
	for i, f := range params.Failures {
		st := s.streamFor(f.StreamID)
		holds := params.InstanceID != uuid.Nil && st.holder == params.InstanceID
		for _, id := range f.FailedWorkIDs {
			r := s.work.get(id)
			if !holds || !rowOf(r, f.StreamID, f.Perspective) {
				continue
			}
			switch {
			case f.Attempt > 0:
				// The report names the attempt it charges: sent again, it
				// charges nothing more.
				r.attempts = max(r.attempts, f.Attempt)
			case r.version <= st.mark(f.Perspective):
				// Handed out: an apply of it failed. A resent report finds
				// it below the mark the first one lowered, and charges
				// nothing again.
				r.attempts++
			}
			r.err = f.Error
			r.scheduled = f.RetryAt
			st.lowerMark(f.Perspective, r.version)
		}
		var eventRow *workRow
		if f.FailedEventID != uuid.Nil {
			eventRow = s.failEvent(st, &f, eventRowIDs[i], now)
		}
		cur := s.reportedCursor(st, f.Perspective, now)
		if cur == nil {
			continue
		}
		// A stale report leaves the status alone: the pair went on since
		// (its position is past the failure's), or the caller lost the
		// stream (its failure tells nothing of the pair now; one naming an
		// event, a replay's, is any instance's to send).
		lost := params.InstanceID != uuid.Nil && !holds && f.FailedEventID == uuid.Nil
		behind := lost || f.LastVersion > 0 && f.LastVersion < cur.LastVersion
		if f.LastVersion > cur.LastVersion {
			cur.LastEventID, cur.LastVersion = f.LastEventID, f.LastVersion
			k := pairKey{f.StreamID, f.Perspective}
			if _, seen := reported[k]; !seen {
				moved = append(moved, k)
			}
			reported[k] = max(reported[k], f.LastVersion)
		}
		if !behind {
			cur.Status = cur.Status&^ports.CursorCompleted | ports.CursorFailed
			cur.Error = f.Error
		}
		cur.UpdatedAt = now
		if eventRow != nil && cur.LastVersion > f.FailedEventVersion {
			flagRewind(cur, f.FailedEventID, f.FailedEventVersion, now) // only a rewind applies it in order
			eventRow.late = true
		}
	}
	listed := listedRows(params.Failures, func(f ports.Failure) []uuid.UUID { return f.AppliedWorkIDs })
	for _, k := range moved {
		s.flagStragglers(k, reported[k], listed, now)
	}
	for _, f := range params.Failures {
		st := s.streams[f.StreamID]
		s.releaseIfDrained(st)
		s.touch(st, now)
	}
	return nil
}

// failEvent charges the failure f of an event (FailedEventID) to the pending
// row of its pair for that event, whoever holds the stream, as to a failed
// row; when the pair has none, as after a replay of an event applied long
// ago, it stores one under rowID, marked as a replay's (the event was
// applied before), unless the perspective is retired. Either
// way the row waits until RetryAt, holding the rest of the pair behind it.
// It returns the row, which the caller makes late when the cursor is past
// the event, or nil.
func (s *Store) failEvent(st *stream, f *ports.Failure, rowID uuid.UUID, now time.Time) *workRow {
	if p := st.pair(f.Perspective); p != nil {
		if i, ok := p.rowIndex(f.FailedEventVersion); ok {
			r := p.pending()[i]
			r.attempts++
			r.err = f.Error
			r.scheduled = f.RetryAt
			return r
		}
	}
	if _, retired := s.retired[f.Perspective]; retired {
		return nil // nothing would ever apply it, and its stream would never drain
	}
	r := &workRow{
		id:          rowID,
		streamID:    st.id,
		perspective: f.Perspective,
		eventID:     f.FailedEventID,
		version:     f.FailedEventVersion,
		scheduled:   f.RetryAt,
		attempts:    1,
		err:         f.Error,
		replay:      true,
		seq:         s.nextSeq(),
		createdAt:   now,
	}
	s.addRow(st, r)
	return r
}

// finishRows completes the listed rows of one (stream, perspective) of a
// stream whose lease instance holds and returns how many it completed. A completed row stored by a
// dead-letter requeue recovers its dead letter. The rows are usually the
// pair's first pending rows in version order, which come off its front in
// O(1) each.
func (s *Store) finishRows(instance, streamID uuid.UUID, perspective string, ids []uuid.UUID, debug bool, now time.Time) int {
	st := s.streams[streamID]
	if st == nil || instance == uuid.Nil || st.holder != instance {
		return 0
	}
	pi, ok := st.pairIndex(perspective)
	if !ok {
		return 0
	}
	p := st.pairs[pi]
	n := 0
	for _, id := range ids {
		// The pair's first row is the usual one, and is recognized without a
		// lookup in s.work.
		var r *workRow
		if rows := p.pending(); len(rows) > 0 && rows[0].id == id {
			r = rows[0]
		} else if r = s.work.get(id); !rowOf(r, streamID, perspective) {
			continue
		}
		p.remove(r) // a pending row of (streamID, perspective) is in p
		s.leaveBacklog(p, r)
		s.work.remove(r)
		if r.deadLetterID != uuid.Nil {
			s.recoverDeadLetter(r.deadLetterID, now)
		}
		if debug {
			r.processedAt = now
			s.processed[id] = r
		}
		n++
	}
	if n == 0 {
		return 0
	}
	st.pending -= n
	if len(p.pending()) == 0 {
		st.pairs = slices.Delete(st.pairs, pi, pi+1)
	}
	return n
}

// rowOf reports whether r is a pending row of (streamID, perspective). With
// the lease of the stream, it is the fence of every completion and failure.
func rowOf(r *workRow, streamID uuid.UUID, perspective string) bool {
	return r != nil && r.streamID == streamID && r.perspective == perspective
}

// cursorFor returns the cursor of (st, perspective), creating an empty one
// when missing.
func (s *Store) cursorFor(st *stream, perspective string, now time.Time) *ports.Cursor {
	cur := st.cursors[perspective]
	if cur == nil {
		cur = &ports.Cursor{StreamID: st.id, Perspective: perspective, UpdatedAt: now}
		st.cursors[perspective] = cur
	}
	return cur
}

// reportedCursor returns the cursor of (st, perspective) that a completion
// or a failure updates, creating it when missing, except for a retired
// perspective: nil then. Such a report was sent before the retirement,
// whose DropState deleted the cursor with the model the report's position
// stands for; a cursor without it would be refused by every save.
func (s *Store) reportedCursor(st *stream, perspective string, now time.Time) *ports.Cursor {
	if st.cursors[perspective] == nil {
		if _, retired := s.retired[perspective]; retired {
			return nil
		}
	}
	return s.cursorFor(st, perspective, now)
}

// flagStragglers flags the cursor of k RewindRequired, and makes the rows
// late, when pending rows of the pair lie below the position a completion or
// failure of this call reported (reported): their events were never applied
// although the cursor passed them. Rows below the stored cursor but not below
// what the call reports are rows applied by earlier batches whose completions
// are still on their way: flagging them would cause phantom rewinds. Rows
// the call lists as applied (listed) are no stragglers either: they are
// still pending because the caller lost the stream, but the model it saved
// holds their events.
func (s *Store) flagStragglers(k pairKey, reported int64, listed map[uuid.UUID]bool, now time.Time) bool {
	st := s.streams[k.streamID]
	cur := st.cursors[k.perspective]
	p := st.pair(k.perspective)
	if cur == nil || p == nil || p.first().version >= reported {
		return false
	}
	var trigger *workRow
	for _, r := range p.pending() {
		if r.version >= reported {
			break
		}
		if !listed[r.id] {
			trigger = r
			break
		}
	}
	if trigger == nil {
		return false
	}
	flagRewind(cur, trigger.eventID, trigger.version, now)
	p.markLate(reported, listed)
	return true
}

// listedRows returns the ids of the rows the entries of a call list as
// applied, nil when there are none.
func listedRows[T any](entries []T, ids func(T) []uuid.UUID) map[uuid.UUID]bool {
	var out map[uuid.UUID]bool
	for _, e := range entries {
		for _, id := range ids(e) {
			if out == nil {
				out = map[uuid.UUID]bool{}
			}
			out[id] = true
		}
	}
	return out
}
