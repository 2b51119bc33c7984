package cli_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/cmd/vantage/internal/cli"
	"github.com/vantage-go/vantage/ports"
)

// rebuildsJSON is the JSON of rebuild list.
type rebuildsJSON struct {
	Truncated bool          `json:"truncated"`
	Rebuilds  []rebuildJSON `json:"rebuilds"`
}

// rebuildCancelJSON is the JSON of rebuild cancel.
type rebuildCancelJSON struct {
	AlreadyCancelled bool        `json:"already_cancelled"`
	Rebuild          rebuildJSON `json:"rebuild"`
}

func TestRebuildList(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		*db
		b        ports.Backend
		rebuilds []ports.RebuildRequest // oldest first
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		d := migratedDB(t)
		b := d.backend(t)
		return &testBundle{db: d, b: b, rebuilds: rebuildRequests(t, b)}
	}
	listJSON := func(t *testing.T, tb *testBundle, args ...string) rebuildsJSON {
		t.Helper()
		res := tb.run(t, append([]string{"rebuild", "list", "--json"}, args...)...)
		require.Equal(t, cli.ExitOK, res.code, res.stderr)
		var got rebuildsJSON
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
		return got
	}

	t.Run("Table", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		res := tb.run(t, "rebuild", "list")
		require.Equal(t, cli.ExitOK, res.code)
		golden(t, "rebuild_list", maskIDs(res.stdout, tb.schema, orderStreams[1].String()))
	})
	t.Run("JSON", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		got := listJSON(t, tb)
		require.False(t, got.Truncated)
		require.Len(t, got.Rebuilds, 5)
		for i, r := range got.Rebuilds {
			require.Equal(t, tb.rebuilds[4-i].ID, r.ID, "newest first")
		}
		running := got.Rebuilds[4]
		require.Equal(t, "running", running.Status)
		require.Equal(t, "customer_stats", running.Perspective)
		require.Equal(t, []uuid.UUID{}, running.StreamIDs, "every stream: an empty list")
		require.Equal(t, "alice, INC-2291", running.RequestedBy)
		require.Equal(t, rebuildInstance, *running.InstanceID)
		require.Equal(t, 1, running.Attempt)
		require.Equal(t, fixedNow.Add(-10*time.Minute), *running.RequestedAt)
		require.Equal(t, fixedNow.Add(-9*time.Minute), *running.StartedAt)
		require.Equal(t, fixedNow.Add(-time.Minute), *running.UpdatedAt)
		require.Equal(t, fixedNow.Add(59*time.Minute), *running.ClaimExpiry)
		require.Nil(t, running.FinishedAt)
		require.Equal(t, int64(5), running.StreamsTotal)
		require.Equal(t, int64(2), running.StreamsDone)
		require.Equal(t, int64(40), running.EventsReplayed)
		require.Equal(t, 720.0, *running.RemainingSeconds, "8 minutes for 2 streams: 12 for the 3 left")

		failed := got.Rebuilds[2]
		require.Equal(t, "failed", failed.Status)
		require.Contains(t, failed.Error, "amount must be positive")
		require.Nil(t, failed.RemainingSeconds)
		require.Equal(t, fixedNow.Add(-4*time.Minute), *failed.FinishedAt)
		require.Equal(t, []uuid.UUID{orderStreams[0], orderStreams[1]}, got.Rebuilds[0].StreamIDs)
	})
	t.Run("Filters", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		require.Len(t, listJSON(t, tb, "--perspective", "order_summary").Rebuilds, 2)
		running := listJSON(t, tb, "--status", "running").Rebuilds
		require.Len(t, running, 1)
		require.Equal(t, tb.rebuilds[0].ID, running[0].ID)
		require.Len(t, listJSON(t, tb, "--status", "cancelled", "--perspective", "order_summary").Rebuilds, 1)
		require.Empty(t, listJSON(t, tb, "--perspective", "invoice_totals").Rebuilds)

		limited := listJSON(t, tb, "--limit", "2")
		require.True(t, limited.Truncated)
		require.Len(t, limited.Rebuilds, 2)
		require.Equal(t, tb.rebuilds[4].ID, limited.Rebuilds[0].ID, "the newest")
		res := tb.run(t, "rebuild", "list", "--limit", "2")
		require.Contains(t, res.stderr, "more rebuild requests match")
		require.False(t, listJSON(t, tb, "--limit", "5").Truncated)
		require.Len(t, listJSON(t, tb, "--limit", "0").Rebuilds, 5)
	})
	t.Run("None", func(t *testing.T) {
		t.Parallel()
		d := migratedDB(t)
		res := d.run(t, "rebuild", "list")
		require.Equal(t, cli.ExitOK, res.code)
		require.Equal(t, "no rebuild requests\n", res.stdout)
		res = d.run(t, "rebuild", "list", "--json")
		require.JSONEq(t, `{"truncated": false, "rebuilds": []}`, res.stdout)
	})
	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		running, done, failed, cancelled, pending := tb.rebuilds[0], tb.rebuilds[1], tb.rebuilds[2], tb.rebuilds[3], tb.rebuilds[4]

		res := tb.run(t, "rebuild", "cancel", running.ID.String())
		require.Equal(t, cli.ExitOK, res.code, res.stderr)
		require.Equal(t, "cancelled rebuild "+running.ID.String()+` of perspective "customer_stats" after 2 of 5 streams; the streams rebuilt stay rebuilt`+"\n", res.stdout)
		err := tb.b.Rebuilds.RebuildProgress(t.Context(), &ports.RebuildProgressParams{
			ID: running.ID, InstanceID: rebuildInstance, Attempt: running.Attempt, ClaimDuration: time.Hour,
		})
		require.ErrorIs(t, err, ports.ErrVersionConflict, "the instance running it is fenced out")

		res = tb.run(t, "rebuild", "cancel", pending.ID.String(), "--json")
		require.Equal(t, cli.ExitOK, res.code)
		var got rebuildCancelJSON
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
		require.False(t, got.AlreadyCancelled)
		require.Equal(t, pending.ID, got.Rebuild.ID)
		require.Equal(t, "cancelled", got.Rebuild.Status)
		require.NotNil(t, got.Rebuild.FinishedAt)

		res = tb.run(t, "rebuild", "cancel", cancelled.ID.String())
		require.Equal(t, cli.ExitOK, res.code, "cancelling a cancelled request changes nothing")
		require.Contains(t, res.stdout, "was already cancelled")

		for _, r := range []ports.RebuildRequest{done, failed} {
			res = tb.run(t, "rebuild", "cancel", r.ID.String())
			require.Equal(t, cli.ExitRefused, res.code)
			require.Contains(t, res.stderr, "is "+string(r.Status)+": only a pending or running one can be cancelled")
			require.Empty(t, res.stdout)
		}
	})
}
