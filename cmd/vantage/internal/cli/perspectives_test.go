package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/cmd/vantage/internal/cli"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

// retireJSON is the JSON of retire.
type retireJSON struct {
	Perspective    string `json:"perspective"`
	AlreadyRetired bool   `json:"already_retired"`
	DroppedModels  bool   `json:"dropped_models"`
	Subscriptions  int    `json:"subscriptions"`
	Work           int    `json:"work"`
	Cursors        int    `json:"cursors"`
	Models         int    `json:"models"`
	Snapshots      int    `json:"snapshots"`
}

func TestRetireAndRevive(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		*db
		b ports.Backend
	}
	// setup has customer_stats apply two orders, then two more orders
	// wait for it: one cursor, one model, two pending work rows, one
	// subscription (order_placed).
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		d := migratedDB(t)
		b := d.backend(t)
		appendOrders(t, b, 0, orderPlaced{Amount: 1}, orderPlaced{Amount: 2})
		applied := make(chan core.PerspectiveEventProcessed, 16)
		opts := core.Options{}
		opts.Hooks.OnPerspectiveEventProcessed = func(e core.PerspectiveEventProcessed) { applied <- e }
		process(t, b, opts, func() {
			for reached := map[string]int64{}; reached["customer_stats"] < 2 || reached["order_summary"] < 2; {
				e := waitFor(t, applied, "both perspectives to apply the orders")
				reached[e.Perspective] = max(reached[e.Perspective], e.LastVersion)
			}
		})
		appendOrders(t, b, 2, orderPlaced{Amount: 3}, orderPlaced{Amount: 4})
		return &testBundle{db: d, b: b}
	}
	retired := func(t *testing.T, tb *testBundle) []string {
		t.Helper()
		names, err := tb.b.Admin.PerspectivesRetired(t.Context())
		require.NoError(t, err)
		return names
	}

	t.Run("Retire", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		res := tb.run(t, "retire", "customer_stats", "--yes")
		require.Equal(t, cli.ExitOK, res.code)
		golden(t, "retire", mask(res.stdout, tb.schema))
		require.Equal(t, []string{"customer_stats"}, retired(t, tb))

		// Again, dropping the state this time.
		res = tb.run(t, "retire", "customer_stats", "--yes", "--drop-models", "--json")
		require.Equal(t, cli.ExitOK, res.code)
		var got retireJSON
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
		require.Equal(t, retireJSON{
			Perspective: "customer_stats", AlreadyRetired: true, DroppedModels: true, Cursors: 1, Models: 1,
		}, got)
	})
	t.Run("RetireDroppingModels", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		res := tb.run(t, "retire", "customer_stats", "--drop-models", "-y", "--json")
		require.Equal(t, cli.ExitOK, res.code)
		var got retireJSON
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
		require.Equal(t, retireJSON{
			Perspective: "customer_stats", DroppedModels: true, Subscriptions: 1, Work: 2, Cursors: 1, Models: 1,
		}, got)
	})
	t.Run("AskedOnATerminal", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		tb.env = cli.Env{Interactive: true, Stdin: strings.NewReader("\n")}
		res := tb.run(t, "retire", "customer_stats")
		require.Equal(t, cli.ExitRefused, res.code, "no answer is a no")
		require.Contains(t, res.stderr, `Retire perspective "customer_stats"`)
		require.Empty(t, retired(t, tb))

		tb.env = cli.Env{Interactive: true, Stdin: strings.NewReader("y\n")}
		require.Equal(t, cli.ExitOK, tb.run(t, "retire", "customer_stats").code)
		require.Equal(t, []string{"customer_stats"}, retired(t, tb))
	})
	t.Run("RefusedWithoutTerminalOrYes", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		res := tb.run(t, "retire", "customer_stats")
		require.Equal(t, cli.ExitRefused, res.code)
		require.Contains(t, res.stderr, "pass --yes")
		require.Empty(t, retired(t, tb))
	})
	t.Run("UnknownPerspective", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		res := tb.run(t, "retire", "customer_stat", "--yes")
		require.Equal(t, cli.ExitNotFound, res.code)
		require.Contains(t, res.stderr, `perspective "customer_stat" is unknown`)
		require.Empty(t, res.stdout)
		require.Empty(t, retired(t, tb), "nothing retired")

		require.Equal(t, cli.ExitNotFound, tb.run(t, "revive", "customer_stat").code)
	})
	t.Run("Revive", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		res := tb.run(t, "revive", "customer_stats")
		require.Equal(t, cli.ExitOK, res.code)
		require.Equal(t, "perspective \"customer_stats\" is not retired: nothing to revive\n", res.stdout)

		require.Equal(t, cli.ExitOK, tb.run(t, "retire", "customer_stats", "--yes").code)
		res = tb.run(t, "revive", "customer_stats", "--json")
		require.Equal(t, cli.ExitOK, res.code)
		require.JSONEq(t, `{"perspective": "customer_stats", "revived": true}`, res.stdout)
		require.Empty(t, retired(t, tb))
	})
}
