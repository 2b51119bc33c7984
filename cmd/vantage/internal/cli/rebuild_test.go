package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/cmd/vantage/internal/cli"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

// rebuildJSON is the JSON of a rebuild request.
type rebuildJSON struct {
	ID               uuid.UUID   `json:"id"`
	Perspective      string      `json:"perspective"`
	StreamIDs        []uuid.UUID `json:"stream_ids"`
	RequestedBy      string      `json:"requested_by"`
	RequestedAt      *time.Time  `json:"requested_at"`
	Status           string      `json:"status"`
	InstanceID       *uuid.UUID  `json:"instance_id"`
	Attempt          int         `json:"attempt"`
	ClaimExpiry      *time.Time  `json:"claim_expiry"`
	StartedAt        *time.Time  `json:"started_at"`
	UpdatedAt        *time.Time  `json:"updated_at"`
	FinishedAt       *time.Time  `json:"finished_at"`
	Error            string      `json:"error"`
	StreamsTotal     int64       `json:"streams_total"`
	StreamsDone      int64       `json:"streams_done"`
	EventsReplayed   int64       `json:"events_replayed"`
	RemainingSeconds *float64    `json:"remaining_seconds"`
}

// requestedPattern finds the id in the first line of rebuild.
var requestedPattern = regexp.MustCompile(`(?m)^requested rebuild (\S+) of perspective`)

// requestedID returns the id of the request that the first line of
// rebuild names.
func requestedID(t *testing.T, stdout string) uuid.UUID {
	t.Helper()
	m := requestedPattern.FindStringSubmatch(stdout)
	require.NotNil(t, m, "the first line names the request: %q", stdout)
	return uuid.MustParse(m[1])
}

// orderStreams are the streams of TestRebuild, with 1, 2 and 3 orders.
var orderStreams = []uuid.UUID{
	uuid.MustParse("0197a3c4-2222-7000-8000-000000000001"),
	uuid.MustParse("0197a3c4-2222-7000-8000-000000000002"),
	uuid.MustParse("0197a3c4-2222-7000-8000-000000000003"),
}

func TestRebuild(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		*db
		b ports.Backend
	}
	// setup appends orders to orderStreams, 1, 2 and 3 of them, and
	// nothing applies them.
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		d := migratedDB(t)
		b := d.backend(t)
		for i, stream := range orderStreams {
			var events []any
			for n := range i + 1 {
				events = append(events, orderPlaced{Amount: 10 * (n + 1)})
			}
			_, err := registry(t).Append(t.Context(), b.Events, stream, ports.ExpectNoStream, events...)
			require.NoError(t, err)
		}
		return &testBundle{db: d, b: b}
	}

	// A worker carries out the request the command files, and the command
	// follows it to its end: the models are then those a replay from
	// scratch computes, even one that was wrong before.
	t.Run("WaitCarriedOutByAWorker", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		applyAll(t, tb.b)
		// A model gone wrong, as a bug in a handler would leave it.
		stored, err := tb.b.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: orderStreams[2], Perspective: "customer_stats"})
		require.NoError(t, err)
		require.NoError(t, tb.b.Models.ModelSave(t.Context(), &ports.ModelSaveParams{
			StreamID: orderStreams[2], Perspective: "customer_stats", Data: []byte(`{"Events": 99}`),
			LastEventID: stored.LastEventID, LastVersion: stored.LastVersion, ExpectedVersion: stored.LastVersion,
		}))

		ended := make(chan ports.RebuildRequest, 1)
		opts := core.Options{Rewind: core.RewindOptions{RebuildPollInterval: 10 * time.Millisecond}}
		opts.Hooks.OnRebuildRequest = func(r ports.RebuildRequest) {
			if r.Status == ports.RebuildDone || r.Status == ports.RebuildFailed {
				ended <- r
			}
		}
		var (
			res      result
			byWorker ports.RebuildRequest
		)
		process(t, tb.b, opts, func() {
			res = tb.run(t, "rebuild", "customer_stats", "--wait", "--interval", "10ms", "--requested-by", "test")
			if res.code == cli.ExitOK {
				// The command may see the end committed before the worker
				// returns from recording it: stop the worker only after.
				byWorker = waitFor(t, ended, "the worker to report the request's end")
			}
		})
		require.Equal(t, cli.ExitOK, res.code, res.stderr)
		id := requestedID(t, res.stdout)
		require.Contains(t, res.stdout, "done: 3 streams rebuilt, 6 events replayed")
		require.NotContains(t, res.stderr, "no engine instance is live")
		require.Equal(t, id, byWorker.ID)
		require.Equal(t, ports.RebuildDone, byWorker.Status)

		for _, stream := range orderStreams {
			model, err := core.NewPerspective[customerStats]("customer_stats").Load(t.Context(), tb.b.Models, stream)
			require.NoError(t, err)
			require.Equal(t, replayCustomerStats(t, tb.b, stream), model.Value, "stream %s: the model of a replay from scratch", stream)
		}
		got, err := tb.b.Admin.RebuildGet(t.Context(), &ports.RebuildGetParams{ID: id})
		require.NoError(t, err)
		require.Equal(t, "test", got.RequestedBy)
		require.Equal(t, ports.RebuildFigures{StreamsTotal: 3, StreamsDone: 3, EventsReplayed: 6, ResumeAfter: orderStreams[2]}, got.RebuildFigures)
	})
	// A deploy whose customer_stats cannot apply an order of 30 fails the
	// rebuild at the third stream, the first two rebuilt.
	t.Run("WaitFailed", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		applyAll(t, tb.b)
		errBroken := errors.New("customer_stats v2 cannot count an order of 30")
		broken := core.NewRegistry()
		require.NoError(t, core.RegisterEvent[orderPlaced](broken, "order_placed"))
		stats := core.NewPerspective[customerStats]("customer_stats")
		core.MustHandle(stats, func(_ context.Context, m customerStats, e orderPlaced) (customerStats, error) {
			if e.Amount == 30 {
				return m, errBroken
			}
			m.Events++
			return m, nil
		})
		require.NoError(t, broken.AddPerspective(stats))

		var res result
		processWith(t, tb.b, broken, core.Options{Rewind: core.RewindOptions{RebuildPollInterval: 10 * time.Millisecond}}, func() {
			res = tb.run(t, "rebuild", "customer_stats", "--wait", "--interval", "10ms", "--json")
		})
		require.Equal(t, cli.ExitFailed, res.code)
		require.Contains(t, res.stderr, "failed after 2 of 3 streams: ")
		require.Contains(t, res.stderr, errBroken.Error())
		var got rebuildJSON
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &got), "--json: one document, the request as it ended")
		require.Equal(t, "failed", got.Status)
		require.Equal(t, int64(2), got.StreamsDone)
		require.Equal(t, int64(3), got.StreamsTotal)
		require.Contains(t, got.Error, errBroken.Error())
		require.NotNil(t, got.FinishedAt)
		require.Nil(t, got.RemainingSeconds)
	})
	// Without a worker, the request waits; cancelled meanwhile, the wait
	// ends with exit 3.
	t.Run("WaitCancelled", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		ticks := make(chan time.Time)
		tb.env = cli.WithTicks(tb.env, ticks)
		cmd := tb.start(t, "rebuild", "customer_stats", "--wait")
		id := requestedID(t, waitFor(t, cmd.stdout, "the request's id"))
		require.Equal(t, "pending: waiting for an instance that runs \"customer_stats\" to claim it\n", waitFor(t, cmd.stdout, "the first progress line"))
		require.NoError(t, tb.b.Admin.RebuildCancel(t.Context(), &ports.RebuildCancelParams{ID: id}))
		ticks <- time.Time{}
		code, stdout := cmd.wait(t)
		require.Equal(t, cli.ExitRefused, code)
		require.Equal(t, "cancelled before an instance claimed it\n", stdout)
		require.Contains(t, cmd.stderr.String(), "no engine instance is live")
		require.Contains(t, cmd.stderr.String(), "was cancelled")
	})
	// A request that did not move on prints no line; interrupted, the
	// command stops waiting, and the request goes on.
	t.Run("WaitInterrupted", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		ticks := make(chan time.Time)
		tb.env = cli.WithTicks(tb.env, ticks)
		cmd := tb.start(t, "rebuild", "customer_stats", "--wait")
		id := requestedID(t, waitFor(t, cmd.stdout, "the request's id"))
		waitFor(t, cmd.stdout, "the first progress line")
		ticks <- time.Time{}
		ticks <- time.Time{} // taken once the read of the first tick is done
		cmd.cancel()
		code, stdout := cmd.wait(t)
		require.Equal(t, cli.ExitFailed, code)
		require.Empty(t, stdout, "nothing moved on")
		require.Contains(t, cmd.stderr.String(), "stopped waiting for rebuild "+id.String()+", which goes on")
		got, err := tb.b.Admin.RebuildGet(t.Context(), &ports.RebuildGetParams{ID: id})
		require.NoError(t, err)
		require.Equal(t, ports.RebuildPending, got.Status)
	})
	t.Run("Request", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		res := tb.run(t, "rebuild", "customer_stats")
		require.Equal(t, cli.ExitOK, res.code)
		id := requestedID(t, res.stdout)
		require.Contains(t, res.stdout, `of perspective "customer_stats", every stream`)
		require.Contains(t, res.stdout, "'vantage rebuild cancel "+id.String()+"' stops it")
		require.Contains(t, res.stderr, "no engine instance is live")

		res = tb.run(t, "rebuild", "customer_stats", "--json", "--requested-by", "alice",
			"--stream", orderStreams[1].String(), "--stream", orderStreams[0].String(), "--stream", orderStreams[1].String())
		require.Equal(t, cli.ExitOK, res.code)
		var got rebuildJSON
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
		require.Equal(t, requestedID(t, res.stderr), got.ID, "the id goes to stderr with --json")
		require.Equal(t, "customer_stats", got.Perspective)
		require.Equal(t, []uuid.UUID{orderStreams[0], orderStreams[1]}, got.StreamIDs, "sorted, without repeats")
		require.Equal(t, "alice", got.RequestedBy)
		require.Equal(t, "pending", got.Status)
		require.NotNil(t, got.RequestedAt)
		require.Nil(t, got.InstanceID)
		require.Nil(t, got.StartedAt)
		require.Nil(t, got.RemainingSeconds)
		require.Zero(t, got.StreamsTotal)

		stored, err := tb.b.Admin.RebuildGet(t.Context(), &ports.RebuildGetParams{ID: got.ID})
		require.NoError(t, err)
		require.Equal(t, ports.RebuildPending, stored.Status)
	})
	t.Run("RetiredPerspective", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		_, err := tb.b.Admin.PerspectiveRetire(t.Context(), &ports.PerspectiveRetireParams{Perspective: "customer_stats"})
		require.NoError(t, err)
		res := tb.run(t, "rebuild", "customer_stats")
		require.Equal(t, cli.ExitRefused, res.code)
		require.Contains(t, res.stderr, `perspective "customer_stats" is retired: revive it`)
		list, err := tb.b.Admin.RebuildsList(t.Context(), &ports.RebuildsListParams{})
		require.NoError(t, err)
		require.Empty(t, list)
	})
}

// applyAll has an engine instance apply every order of orderStreams.
func applyAll(t *testing.T, b ports.Backend) {
	t.Helper()
	applied := make(chan core.PerspectiveEventProcessed, 64)
	opts := core.Options{}
	opts.Hooks.OnPerspectiveEventProcessed = func(e core.PerspectiveEventProcessed) { applied <- e }
	process(t, b, opts, func() {
		for reached := map[uuid.UUID]int64{}; !allCaughtUp(reached); {
			if e := waitFor(t, applied, "customer_stats to apply the orders"); e.Perspective == "customer_stats" {
				reached[e.StreamID] = max(reached[e.StreamID], e.LastVersion)
			}
		}
	})
}

// allCaughtUp reports whether customer_stats reached the last order of
// each of orderStreams.
func allCaughtUp(reached map[uuid.UUID]int64) bool {
	for i, stream := range orderStreams {
		if reached[stream] < int64(i+1) {
			return false
		}
	}
	return true
}

// replayCustomerStats computes the model of customer_stats for stream
// from its events, as a replay from scratch does.
func replayCustomerStats(t *testing.T, b ports.Backend, stream uuid.UUID) customerStats {
	t.Helper()
	events, err := b.Fetcher.EventsReadStream(t.Context(), &ports.EventsReadStreamParams{StreamID: stream})
	require.NoError(t, err)
	require.NotEmpty(t, events)
	var m customerStats
	for _, e := range events {
		if e.Type == "order_placed" {
			m.Events++
		}
	}
	return m
}
