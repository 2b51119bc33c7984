package cli_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/cmd/vantage/internal/cli"
	"github.com/vantage-go/vantage/ports"
)

// statusJSON is the JSON of status.
type statusJSON struct {
	Schema            string     `json:"schema"`
	Now               *time.Time `json:"now"`
	LiveWithinSeconds float64    `json:"live_within_seconds"`
	Perspectives      []struct {
		Perspective             string   `json:"perspective"`
		Retired                 bool     `json:"retired"`
		EventTypes              []string `json:"event_types"`
		Streams                 int64    `json:"streams"`
		CaughtUp                int64    `json:"caught_up"`
		PendingStreams          int64    `json:"pending_streams"`
		Failed                  int64    `json:"failed"`
		AwaitingRetry           int64    `json:"awaiting_retry"`
		RewindRequired          int64    `json:"rewind_required"`
		Pending                 int64    `json:"pending"`
		OldestPendingAgeSeconds float64  `json:"oldest_pending_age_seconds"`
		DeadLetters             int64    `json:"dead_letters"`
	} `json:"perspectives"`
	Instances []struct {
		ID                  uuid.UUID `json:"id"`
		HeartbeatAgeSeconds float64   `json:"heartbeat_age_seconds"`
		Live                bool      `json:"live"`
		LeasedStreams       int       `json:"leased_streams"`
	} `json:"instances"`
	Rebuilds []rebuildJSON `json:"rebuilds"`
}

// statusSchema is a schema in which every figure of status has a value:
//
//   - customer_stats has applied orderStream (version 3), which holds a
//     pending order stored 3m12s ago, and has a model of orderStreams[0]
//     at version 3, whose versions 1 and 3 are pending since 5 minutes
//     and version 2 arrived late since: a rewind is required;
//   - order_summary has two dead letters (the failed payments of
//     orderStream) and the same pending work as customer_stats;
//   - invoice_totals has one dead letter and nothing else;
//   - legacy_totals is retired, one dead letter left;
//   - shipping_eta has one event pending for 30s, in a stream the first
//     instance holds, whose apply failed: it waits for its retry;
//   - the instances of heartbeats, and the rebuild requests of
//     rebuildRequests.
//
// Its Env measures ages at fixedNow.
func statusSchema(t *testing.T) (*db, ports.Backend) {
	t.Helper()
	d := migratedDB(t)
	b := d.backend(t)
	ctx := t.Context()
	deadLetters(t, b) // runs an engine instance, stopped before the rest
	handMadeDeadLetter(t, b, "invoice_totals")
	handMadeDeadLetter(t, b, "legacy_totals")
	_, err := b.Admin.PerspectiveRetire(ctx, &ports.PerspectiveRetireParams{Perspective: "legacy_totals"})
	require.NoError(t, err)
	heartbeats(t, b)
	shipped := leaseStream(t, b, instanceIDs[0])
	require.NoError(t, b.Cursors.WorkFail(ctx, &ports.WorkFailParams{
		InstanceID: instanceIDs[0], Now: fixedNow.Add(-5 * time.Second),
		Failures: []ports.Failure{{
			StreamID: shipped.StreamID, Perspective: "shipping_eta", FailedWorkIDs: []uuid.UUID{shipped.WorkID},
			Error: "eta service unavailable", RetryAt: fixedNow.Add(time.Minute),
		}},
	}))

	order := func(amount int, version int64) ports.NewEvent {
		data, err := json.Marshal(orderPlaced{Amount: amount})
		require.NoError(t, err)
		return ports.NewEvent{Type: "order_placed", Data: data, Version: version}
	}
	_, err = b.Events.EventsAppend(ctx, &ports.EventsAppendParams{
		StreamID: orderStream, ExpectedVersion: 4, Events: []ports.NewEvent{order(5, 0)}, Now: fixedNow.Add(-3*time.Minute - 12*time.Second),
	})
	require.NoError(t, err)
	stored, err := b.Events.EventsAppend(ctx, &ports.EventsAppendParams{
		StreamID: orderStreams[0], ExpectedVersion: ports.ExpectNoStream, Events: []ports.NewEvent{order(1, 1), order(3, 3)},
		Now: fixedNow.Add(-5 * time.Minute),
	})
	require.NoError(t, err)
	require.NoError(t, b.Models.ModelSave(ctx, &ports.ModelSaveParams{
		StreamID: orderStreams[0], Perspective: "customer_stats", Data: []byte(`{"Events": 2}`),
		LastEventID: stored.Events[1].ID, LastVersion: 3, Now: fixedNow.Add(-4 * time.Minute),
	}))
	_, err = b.Events.EventsAppend(ctx, &ports.EventsAppendParams{
		StreamID: orderStreams[0], Events: []ports.NewEvent{order(2, 2)}, Now: fixedNow.Add(-2 * time.Minute),
	})
	require.NoError(t, err)
	rebuildRequests(t, b)
	d.env.Now = func() time.Time { return fixedNow }
	return d, b
}

// statusMask masks what status prints that changes from run to run: the
// schema's name and the ids of the rebuild requests.
func statusMask(s, schema string) string {
	keep := []string{orderStreams[1].String(), rebuildInstance.String()}
	for _, id := range instanceIDs {
		keep = append(keep, id.String())
	}
	return maskIDs(s, schema, keep...)
}

func TestStatus(t *testing.T) {
	t.Parallel()

	t.Run("Table", func(t *testing.T) {
		t.Parallel()
		d, _ := statusSchema(t)
		res := d.run(t, "status")
		require.Equal(t, cli.ExitOK, res.code, res.stderr)
		golden(t, "status", statusMask(res.stdout, d.schema))
	})
	t.Run("JSON", func(t *testing.T) {
		t.Parallel()
		d, _ := statusSchema(t)
		res := d.run(t, "status", "--json")
		require.Equal(t, cli.ExitOK, res.code, res.stderr)
		var got statusJSON
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
		require.Equal(t, d.schema, got.Schema)
		require.Equal(t, fixedNow, *got.Now)
		require.Equal(t, 30.0, got.LiveWithinSeconds)

		names := make([]string, len(got.Perspectives))
		for i, p := range got.Perspectives {
			names[i] = p.Perspective
		}
		require.Equal(t, []string{"customer_stats", "invoice_totals", "legacy_totals", "order_summary", "shipping_eta"}, names)
		stats, legacy, summary, shipping := got.Perspectives[0], got.Perspectives[2], got.Perspectives[3], got.Perspectives[4]
		require.Equal(t, []string{"order_placed"}, stats.EventTypes)
		require.Equal(t, int64(2), stats.Streams)
		require.Zero(t, stats.CaughtUp)
		require.Equal(t, int64(2), stats.PendingStreams)
		require.Equal(t, int64(1), stats.RewindRequired)
		require.Equal(t, int64(4), stats.Pending)
		require.Equal(t, 300.0, stats.OldestPendingAgeSeconds, "the lag: pending since 5 minutes")
		require.True(t, legacy.Retired)
		require.Equal(t, []string{}, legacy.EventTypes)
		require.Equal(t, int64(1), legacy.DeadLetters)
		require.Equal(t, int64(2), summary.DeadLetters)
		require.Equal(t, int64(1), shipping.Failed)
		require.Equal(t, int64(1), shipping.AwaitingRetry)
		require.Equal(t, 30.0, shipping.OldestPendingAgeSeconds)

		require.Len(t, got.Instances, 3)
		require.Equal(t, instanceIDs[0], got.Instances[0].ID)
		require.Equal(t, 2.0, got.Instances[0].HeartbeatAgeSeconds)
		require.True(t, got.Instances[0].Live)
		require.Equal(t, 1, got.Instances[0].LeasedStreams)

		statuses := make([]string, len(got.Rebuilds))
		for i, r := range got.Rebuilds {
			statuses[i] = r.Status
		}
		require.Equal(t, []string{"pending", "cancelled", "failed", "done", "running"}, statuses, "newest first")
		require.Equal(t, 720.0, *got.Rebuilds[4].RemainingSeconds)
	})
	// Only the newest finished rebuild requests are shown; every open one
	// is, however old.
	t.Run("FinishedRebuilds", func(t *testing.T) {
		t.Parallel()
		d := migratedDB(t)
		b := d.backend(t)
		old, err := b.Admin.RebuildRequest(t.Context(), &ports.RebuildRequestParams{Perspective: "customer_stats", Now: fixedNow.Add(-time.Hour)})
		require.NoError(t, err)
		var cancelled []uuid.UUID
		for i := range cli.StatusFinishedRebuilds + 2 {
			r, err := b.Admin.RebuildRequest(t.Context(), &ports.RebuildRequestParams{
				Perspective: "order_summary", Now: fixedNow.Add(time.Duration(i-30) * time.Minute),
			})
			require.NoError(t, err)
			require.NoError(t, b.Admin.RebuildCancel(t.Context(), &ports.RebuildCancelParams{ID: r.ID}))
			cancelled = append(cancelled, r.ID)
		}
		res := d.run(t, "status", "--json")
		require.Equal(t, cli.ExitOK, res.code, res.stderr)
		var got statusJSON
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
		var ids []uuid.UUID
		for _, r := range got.Rebuilds {
			ids = append(ids, r.ID)
		}
		want := []uuid.UUID{}
		for i := len(cancelled) - 1; i >= 2; i-- {
			want = append(want, cancelled[i])
		}
		require.Equal(t, append(want, old.ID), ids)
	})
	// --watch draws a frame per tick, a blank line apart, until
	// interrupted; the second frame shows what changed since the first.
	t.Run("Watch", func(t *testing.T) {
		t.Parallel()
		d, b := statusSchema(t)
		first := d.run(t, "status").stdout
		ticks := make(chan time.Time)
		d.env = cli.WithTicks(d.env, ticks)
		cmd := d.start(t, "status", "--watch")
		require.Equal(t, first, waitFor(t, cmd.stdout, "the first frame"))

		// The pending rebuild request is claimed and moves on.
		claimed, err := b.Rebuilds.RebuildClaim(t.Context(), &ports.RebuildClaimParams{
			InstanceID: instanceIDs[1], Perspectives: []string{"customer_stats"}, ClaimDuration: time.Hour, Now: fixedNow.Add(-40 * time.Second),
		})
		require.NoError(t, err)
		require.True(t, claimed.Claimed)
		require.NoError(t, b.Rebuilds.RebuildProgress(t.Context(), &ports.RebuildProgressParams{
			ID: claimed.Request.ID, InstanceID: instanceIDs[1], Attempt: 1, ClaimDuration: time.Hour, Now: fixedNow.Add(-10 * time.Second),
			RebuildFigures: ports.RebuildFigures{StreamsTotal: 2, StreamsDone: 1, EventsReplayed: 3, ResumeAfter: orderStreams[0]},
		}))
		ticks <- time.Time{}
		second := waitFor(t, cmd.stdout, "the second frame")
		require.True(t, strings.HasPrefix(second, "\n"), "frames are a blank line apart")
		require.NotEqual(t, first, second[1:])
		golden(t, "status_watch_second", statusMask(second, d.schema))

		cmd.cancel()
		code, rest := cmd.wait(t)
		require.Equal(t, cli.ExitOK, code, "interrupting a watch is how it ends")
		require.Empty(t, rest)
		require.Empty(t, cmd.stderr.String())
	})
	t.Run("WatchOnATerminal", func(t *testing.T) {
		t.Parallel()
		d := migratedDB(t)
		ticks := make(chan time.Time)
		d.env = cli.WithTicks(cli.Env{OutputTerminal: true}, ticks)
		cmd := d.start(t, "status", "--watch", "--interval", "5s")
		for range 2 {
			frame := waitFor(t, cmd.stdout, "a frame")
			require.True(t, strings.HasPrefix(frame, "\x1b[H\x1b[2Jschema "), "each frame clears the screen first: %q", frame)
			ticks <- time.Time{}
		}
		waitFor(t, cmd.stdout, "the third frame")
		cmd.cancel()
		code, _ := cmd.wait(t)
		require.Equal(t, cli.ExitOK, code)
	})
	t.Run("WatchJSON", func(t *testing.T) {
		t.Parallel()
		d := migratedDB(t)
		ticks := make(chan time.Time)
		d.env = cli.WithTicks(cli.Env{OutputTerminal: true}, ticks)
		cmd := d.start(t, "status", "--watch", "--json")
		first := waitFor(t, cmd.stdout, "the first frame")
		_, err := d.backend(t).Claimer.InstanceHeartbeat(t.Context(), &ports.InstanceHeartbeatParams{InstanceID: instanceIDs[0], StaleThreshold: time.Hour})
		require.NoError(t, err)
		ticks <- time.Time{}
		second := waitFor(t, cmd.stdout, "the second frame")
		cmd.cancel()
		code, _ := cmd.wait(t)
		require.Equal(t, cli.ExitOK, code)

		// One JSON document per frame, never a screen to clear.
		dec := json.NewDecoder(bytes.NewReader([]byte(first + second)))
		var frames []statusJSON
		for dec.More() {
			var f statusJSON
			require.NoError(t, dec.Decode(&f))
			frames = append(frames, f)
		}
		require.Len(t, frames, 2)
		require.Empty(t, frames[0].Instances)
		require.Len(t, frames[1].Instances, 1)
	})
	t.Run("None", func(t *testing.T) {
		t.Parallel()
		d := migratedDB(t)
		d.env.Now = func() time.Time { return fixedNow }
		res := d.run(t, "status")
		require.Equal(t, cli.ExitOK, res.code)
		require.Equal(t, `schema "`+d.schema+`" at 2026-03-01T12:00:00Z: 0 perspectives (0 behind), 0 pending events, 0 dead letters waiting, `+
			"0 instances (0 live within 30s), 0 rebuilds open\n\nno perspectives\n\nno instances\n\nno rebuild requests\n", res.stdout)
		res = d.run(t, "status", "--json")
		require.JSONEq(t, `{"schema": "`+d.schema+`", "now": "2026-03-01T12:00:00Z", "live_within_seconds": 30,
			"perspectives": [], "instances": [], "rebuilds": []}`, res.stdout)
	})
}
