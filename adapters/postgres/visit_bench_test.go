package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

// BenchmarkStreamVisit measures what the engine's statements cost the
// database for one event of live traffic, where each event finds its
// stream drained: an event is appended to one of 1,000 streams whose
// events fan out to two perspectives, and the stream is visited the way a
// worker drains a notified stream, through the ports: its fetch (lease,
// rows and cursors in one round trip), the two models saved in one call,
// and the completion that deletes the rows and releases the drained
// stream. The appends go through a connection of their own; the engine's
// statements run on one connection, whose server process's CPU per visit
// is reported as db-µs/op and split into fetch-db-µs, save-db-µs and
// complete-db-µs (read from /proc in ticks of 10ms: each settles over a
// few thousand iterations). ns/op includes the append.
//
//	go test -run '^$' -bench StreamVisit -benchtime 5000x ./adapters/postgres/
func BenchmarkStreamVisit(b *testing.B) {
	ctx := b.Context()
	schema := pgtest.Schema(b)
	open := func() (ports.Backend, *pgxpool.Pool) {
		pool := pgtest.NewPoolWith(b, pgtest.PoolOptions{MaxConns: 1})
		store, err := postgres.New(pool, postgres.Options{Schema: schema, PollOnly: true})
		require.NoError(b, err)
		b.Cleanup(func() { _ = store.Close() })
		return store.Backend(), pool
	}
	appends, _ := open()
	backend, enginePool := open()
	require.NotNil(b, backend.ModelBatch, "the PostgreSQL store saves models in batches")
	subs := []ports.Subscription{{EventType: "incremented", Perspective: "counter"}, {EventType: "incremented", Perspective: "totals"}}
	streams := make([]uuid.UUID, 1000)
	for i := range streams {
		streams[i] = uuid.Must(uuid.NewV7())
	}
	instance := uuid.Must(uuid.NewV7())

	visit := func(i int, spent *visitCPU) {
		stream := streams[i%len(streams)]
		_, err := appends.Events.EventsAppend(ctx, &ports.EventsAppendParams{
			StreamID:      stream,
			Events:        []ports.NewEvent{{Type: "incremented", Data: []byte(fmt.Sprintf(`{"by":%d}`, i))}},
			Subscriptions: subs,
		})
		require.NoError(b, err)

		var fetched *ports.EventsFetchPendingResult
		spent.measure(&spent.fetch, func() {
			fetched, err = backend.Fetcher.EventsFetchPending(ctx, &ports.EventsFetchPendingParams{
				InstanceID: instance, StreamIDs: []uuid.UUID{stream},
				LeaseDuration: 5 * time.Minute, StaleThreshold: 30 * time.Second, MaxRows: 10_000,
			})
		})
		require.NoError(b, err)
		require.Len(b, fetched.Work, len(subs), "the stream's new event, once per perspective")

		positions := map[string]int64{}
		for _, c := range fetched.Cursors {
			positions[c.Perspective] = c.LastVersion
		}
		saves := make([]*ports.ModelSaveParams, 0, len(fetched.Work))
		completions := make([]ports.Completion, 0, len(fetched.Work))
		for _, w := range fetched.Work {
			saves = append(saves, &ports.ModelSaveParams{
				StreamID: stream, Perspective: w.Perspective, Data: []byte(fmt.Sprintf(`{"n":%d}`, w.EventVersion)),
				LastEventID: w.EventID, LastVersion: w.EventVersion, ExpectedVersion: positions[w.Perspective],
			})
			completions = append(completions, ports.Completion{
				StreamID: stream, Perspective: w.Perspective, LastEventID: w.EventID, LastVersion: w.EventVersion,
				WorkIDs: []uuid.UUID{w.WorkID},
			})
		}
		var saveErrs []error
		spent.measure(&spent.save, func() {
			saveErrs, err = backend.ModelBatch.ModelSaveMany(ctx, &ports.ModelSaveManyParams{Saves: saves})
		})
		require.NoError(b, err)
		for _, err := range saveErrs {
			require.NoError(b, err)
		}

		var done *ports.WorkCompleteResult
		spent.measure(&spent.complete, func() {
			done, err = backend.Cursors.WorkComplete(ctx, &ports.WorkCompleteParams{InstanceID: instance, Completions: completions})
		})
		require.NoError(b, err)
		require.Equal(b, len(completions), done.Completed)
	}

	// Every stream gets its first event, model and cursor before the
	// timing: the steady state visits streams that have them.
	var warm visitCPU
	for i := range streams {
		visit(i, &warm)
	}
	var pid int
	require.NoError(b, enginePool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	spent := visitCPU{pid: pid}
	b.ResetTimer()
	for i := range b.N {
		visit(i, &spent)
	}
	b.StopTimer()
	if spent.readable {
		perVisit := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(b.N) }
		b.ReportMetric(perVisit(spent.fetch+spent.save+spent.complete), "db-µs/op")
		b.ReportMetric(perVisit(spent.fetch), "fetch-db-µs")
		b.ReportMetric(perVisit(spent.save), "save-db-µs")
		b.ReportMetric(perVisit(spent.complete), "complete-db-µs")
	}
}

// visitCPU sums the CPU a server process spent in each part of the visits.
type visitCPU struct {
	pid                   int // 0: not measured
	readable              bool
	fetch, save, complete time.Duration
}

// measure runs f and adds the CPU the process spent meanwhile to *into.
func (v *visitCPU) measure(into *time.Duration, f func()) {
	if v.pid == 0 {
		f()
		return
	}
	before, ok := backendCPU(v.pid)
	f()
	after, ok2 := backendCPU(v.pid)
	v.readable = ok && ok2
	*into += after - before
}
