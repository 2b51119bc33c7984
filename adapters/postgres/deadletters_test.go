package postgres_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// TestDeadLetterLifecycle walks one dead letter through its statuses: dead
// on generation g1, ignored, requeued by an operator, dead again on g2 (the
// same dead letter, its requeue history kept), recovered by g3 and finally
// completed.
func TestDeadLetterLifecycle(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	subscribe(t, b, testPerspective)
	dls, admin := b.backend.DeadLetters, b.backend.Admin
	stream, inst := newUUID(t), uuid.New()
	_, err := b.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: stream, Events: newEvents(1), Now: base})
	require.NoError(t, err)
	fetch := func(now time.Time) []ports.WorkItem {
		t.Helper()
		res, err := b.backend.Fetcher.EventsFetchPending(ctx, &ports.EventsFetchPendingParams{
			InstanceID: inst, StreamIDs: []uuid.UUID{stream}, LeaseDuration: time.Minute, StaleThreshold: time.Minute, Now: now,
		})
		require.NoError(t, err)
		return res.Work
	}
	list := func(status ports.DeadLetterStatus) []ports.DeadLetter {
		t.Helper()
		out, err := dls.DeadLettersList(ctx, &ports.DeadLettersListParams{Status: status})
		require.NoError(t, err)
		return out
	}
	work := fetch(base)
	require.Len(t, work, 1)
	require.NoError(t, b.backend.Cursors.WorkFail(ctx, &ports.WorkFailParams{InstanceID: inst, Now: base, Failures: []ports.Failure{{
		StreamID: stream, Perspective: testPerspective, FailedWorkIDs: []uuid.UUID{work[0].WorkID}, Error: "row error",
	}}}))

	dlRes, err := dls.DeadLetterMove(ctx, &ports.DeadLetterMoveParams{
		WorkID: work[0].WorkID, InstanceID: inst, Generation: "g1", Reason: ports.ReasonFailed, Attempts: 3, Now: base.Add(time.Second),
	})
	require.NoError(t, err)
	require.True(t, dlRes.Moved)
	dl := dlRes.DeadLetter
	require.Equal(t, ports.DeadLetterDead, dl.Status)
	require.Equal(t, "g1", dl.Generation)
	require.Equal(t, 3, dl.Attempts, "the engine's count, larger than the row's one failure")
	require.Equal(t, "row error", dl.Error, "an empty Error keeps the row's")
	require.Equal(t, []ports.DeadLetter{dl}, list(ports.DeadLetterDead))
	require.Empty(t, list(ports.DeadLetterRequeued))
	_, err = dls.DeadLettersList(ctx, &ports.DeadLettersListParams{Status: "lost"})
	require.ErrorIs(t, err, ports.ErrInvalidArgument)

	require.NoError(t, admin.DeadLetterIgnore(ctx, &ports.DeadLetterIgnoreParams{ID: dl.ID, Now: base.Add(2 * time.Second)}))
	require.NoError(t, admin.DeadLetterIgnore(ctx, &ports.DeadLetterIgnoreParams{ID: dl.ID, Now: base.Add(3 * time.Second)}), "idempotent")
	ignored := list(ports.DeadLetterIgnored)
	require.Len(t, ignored, 1)
	require.Equal(t, base.Add(2*time.Second), ignored[0].ResolvedAt, "resolved when first ignored")
	recovered, err := dls.DeadLettersRecover(ctx, &ports.DeadLettersRecoverParams{Generation: "g2", Limit: 10, Now: base.Add(3 * time.Second)})
	require.NoError(t, err)
	require.Empty(t, recovered, "recovery never retries an ignored dead letter")

	require.NoError(t, admin.DeadLetterRequeue(ctx, &ports.DeadLetterRequeueParams{ID: dl.ID, Generation: "g2", Now: base.Add(4 * time.Second)}))
	requeued := list(ports.DeadLetterRequeued)
	require.Len(t, requeued, 1)
	require.Equal(t, 1, requeued[0].Requeues)
	require.Equal(t, "g2", requeued[0].RequeueGeneration)
	require.Equal(t, base.Add(4*time.Second), requeued[0].RequeuedAt)
	require.Zero(t, requeued[0].ResolvedAt)
	err = admin.DeadLetterRequeue(ctx, &ports.DeadLetterRequeueParams{ID: dl.ID, Now: base.Add(5 * time.Second)})
	require.ErrorIs(t, err, ports.ErrVersionConflict, "a requeued dead letter is not requeued again")
	err = admin.DeadLetterIgnore(ctx, &ports.DeadLetterIgnoreParams{ID: dl.ID, Now: base.Add(5 * time.Second)})
	require.ErrorIs(t, err, ports.ErrVersionConflict)
	require.ErrorIs(t, admin.DeadLetterIgnore(ctx, &ports.DeadLetterIgnoreParams{ID: uuid.New()}), ports.ErrNotFound)
	require.ErrorIs(t, admin.DeadLetterRequeue(ctx, &ports.DeadLetterRequeueParams{ID: uuid.New()}), ports.ErrNotFound)

	// Dead-lettered again, on g2: the same dead letter, dead again.
	work = fetch(base.Add(5 * time.Second))
	require.Len(t, work, 1)
	require.Equal(t, dl.WorkID, work[0].WorkID, "requeued under its original work id")
	require.Zero(t, work[0].Attempts)
	againRes, err := dls.DeadLetterMove(ctx, &ports.DeadLetterMoveParams{
		WorkID: work[0].WorkID, InstanceID: inst, Generation: "g2", Reason: ports.ReasonTimedOut, Error: "slow", Attempts: 1, Now: base.Add(6 * time.Second),
	})
	require.NoError(t, err)
	require.True(t, againRes.Moved)
	again := againRes.DeadLetter
	require.Equal(t, dl.ID, again.ID, "the requeued row's dead letter is updated, not recorded twice")
	require.Equal(t, ports.DeadLetterDead, again.Status)
	require.Equal(t, "g2", again.Generation)
	require.Equal(t, again.Generation, again.RequeueGeneration, "failed again on the generation that requeued it")
	require.Equal(t, 1, again.Requeues)
	require.Equal(t, ports.ReasonTimedOut, again.Reason)
	require.Equal(t, "slow", again.Error)
	require.Equal(t, base.Add(6*time.Second), again.DeadLetteredAt)
	require.Len(t, list(""), 1)

	recovered, err = dls.DeadLettersRecover(ctx, &ports.DeadLettersRecoverParams{Generation: "g2", Limit: 10, Now: base.Add(7 * time.Second)})
	require.NoError(t, err)
	require.Empty(t, recovered, "g2 requeued it already")
	recovered, err = dls.DeadLettersRecover(ctx, &ports.DeadLettersRecoverParams{Generation: "g3", Limit: 10, Now: base.Add(8 * time.Second)})
	require.NoError(t, err)
	require.Len(t, recovered, 1)
	require.Equal(t, ports.DeadLetterRequeued, recovered[0].Status)
	require.Equal(t, 2, recovered[0].Requeues)
	require.Equal(t, "g3", recovered[0].RequeueGeneration)

	work = fetch(base.Add(9 * time.Second))
	require.Len(t, work, 1)
	done, err := b.backend.Cursors.WorkComplete(ctx, &ports.WorkCompleteParams{InstanceID: inst, Now: base.Add(10 * time.Second), Completions: []ports.Completion{{
		StreamID: stream, Perspective: testPerspective, LastEventID: work[0].EventID, LastVersion: 1, WorkIDs: []uuid.UUID{work[0].WorkID},
	}}})
	require.NoError(t, err)
	require.Equal(t, 1, done.Completed)
	final := list(ports.DeadLetterRecovered)
	require.Len(t, final, 1, "completing the requeued row recovers its dead letter")
	require.Equal(t, base.Add(10*time.Second), final[0].ResolvedAt)

	_, err = dls.DeadLettersRecover(ctx, &ports.DeadLettersRecoverParams{Limit: 10})
	require.ErrorIs(t, err, ports.ErrInvalidArgument, "a recovery names its generation")
	_, err = dls.DeadLettersRecover(ctx, &ports.DeadLettersRecoverParams{Generation: "g4"})
	require.ErrorIs(t, err, ports.ErrInvalidArgument, "and a positive limit")
}

// TestConcurrentRecoveriesRequeueOnce has several instances, each a Store on
// its own pool, recover dead letters of a new generation at once, in small
// batches: every dead letter is requeued by exactly one of them.
func TestConcurrentRecoveriesRequeueOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const (
		recoverers = 6
		letters    = 60
		limit      = 7
	)
	b := setup(t)
	s := pgx.Identifier{b.schema}.Sanitize()
	_, err := b.pool.Exec(ctx, `
INSERT INTO `+s+`.vantage_dead_letters
    (id, work_id, stream_id, perspective, event_id, event_version, attempts, reason, error, generation, dead_lettered_at)
SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'p', gen_random_uuid(), 1, 3, 'failed', 'boom', 'g1',
       $2::timestamptz + n * interval '1 second'
FROM generate_series(1, $1::integer) n`, letters, base)
	require.NoError(t, err)
	handles := make([]*testBundle, recoverers)
	for i := range handles {
		handles[i] = newStore(t, b.schema)
	}

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		seen    = map[uuid.UUID]int{}
		errs    = make([]error, recoverers)
		release = make(chan struct{})
	)
	for i, h := range handles {
		wg.Go(func() {
			<-release
			for {
				got, err := h.backend.DeadLetters.DeadLettersRecover(ctx, &ports.DeadLettersRecoverParams{Generation: "g2", Limit: limit, Now: base.Add(time.Hour)})
				if err != nil {
					errs[i] = err
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, dl := range got {
					seen[dl.ID]++
				}
				mu.Unlock()
			}
		})
	}
	close(release)
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	require.Len(t, seen, letters, "every dead letter is recovered")
	for id, n := range seen {
		require.Equal(t, 1, n, "dead letter %s was returned by %d recoveries", id, n)
	}
	var requeues, rows int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT (SELECT sum(requeues) FROM `+s+`.vantage_dead_letters WHERE status = 'requeued'),
		(SELECT count(*) FROM `+s+`.vantage_work WHERE dead_letter_id IS NOT NULL)`).Scan(&requeues, &rows))
	require.Equal(t, letters, requeues)
	require.Equal(t, letters, rows)
}

// TestDebugCompletionRecoversDeadLetter checks that a requeued row completed
// in debug mode (kept, marked processed) recovers its dead letter too.
func TestDebugCompletionRecoversDeadLetter(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	subscribe(t, b, testPerspective)
	stream, inst := newUUID(t), uuid.New()
	_, err := b.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: stream, Events: newEvents(1), Now: base})
	require.NoError(t, err)
	fetch := func() ports.WorkItem {
		t.Helper()
		res, err := b.backend.Fetcher.EventsFetchPending(ctx, &ports.EventsFetchPendingParams{
			InstanceID: inst, StreamIDs: []uuid.UUID{stream}, LeaseDuration: time.Minute, StaleThreshold: time.Minute, Now: base,
		})
		require.NoError(t, err)
		require.Len(t, res.Work, 1)
		return res.Work[0]
	}
	dlRes, err := b.backend.DeadLetters.DeadLetterMove(ctx, &ports.DeadLetterMoveParams{WorkID: fetch().WorkID, InstanceID: inst, Reason: ports.ReasonFailed, Now: base})
	require.NoError(t, err)
	require.True(t, dlRes.Moved)
	dl := dlRes.DeadLetter
	require.NoError(t, b.backend.Admin.DeadLetterRequeue(ctx, &ports.DeadLetterRequeueParams{ID: dl.ID, Now: base}))
	w := fetch()

	_, err = b.backend.Cursors.WorkComplete(ctx, &ports.WorkCompleteParams{InstanceID: inst, DebugMode: true, Now: base.Add(time.Minute), Completions: []ports.Completion{{
		StreamID: stream, Perspective: testPerspective, LastEventID: w.EventID, LastVersion: 1, WorkIDs: []uuid.UUID{w.WorkID},
	}}})
	require.NoError(t, err)
	out, err := b.backend.DeadLetters.DeadLettersList(ctx, &ports.DeadLettersListParams{})
	require.NoError(t, err)
	require.Len(t, out, 1)
	require.Equal(t, ports.DeadLetterRecovered, out[0].Status)
	require.Equal(t, base.Add(time.Minute), out[0].ResolvedAt)
}
