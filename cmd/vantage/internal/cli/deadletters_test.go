package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/cmd/vantage/internal/cli"
	"github.com/vantage-go/vantage/ports"
)

// deadLettersJSON is the JSON of dead-letters list.
type deadLettersJSON struct {
	Truncated   bool `json:"truncated"`
	DeadLetters []struct {
		ID                uuid.UUID  `json:"id"`
		WorkID            uuid.UUID  `json:"work_id"`
		StreamID          uuid.UUID  `json:"stream_id"`
		Perspective       string     `json:"perspective"`
		EventID           uuid.UUID  `json:"event_id"`
		EventVersion      int64      `json:"event_version"`
		Attempts          int        `json:"attempts"`
		Reason            string     `json:"reason"`
		Error             string     `json:"error"`
		InstanceID        *uuid.UUID `json:"instance_id"`
		Generation        string     `json:"generation"`
		DeadLetteredAt    *time.Time `json:"dead_lettered_at"`
		Status            string     `json:"status"`
		Requeues          int        `json:"requeues"`
		RequeuedAt        *time.Time `json:"requeued_at"`
		RequeueGeneration string     `json:"requeue_generation"`
		ResolvedAt        *time.Time `json:"resolved_at"`
	} `json:"dead_letters"`
}

// deadLetterJSON is the JSON of dead-letters show.
type deadLetterJSON struct {
	DeadLetter struct {
		ID           uuid.UUID `json:"id"`
		WorkID       uuid.UUID `json:"work_id"`
		StreamID     uuid.UUID `json:"stream_id"`
		Perspective  string    `json:"perspective"`
		EventID      uuid.UUID `json:"event_id"`
		EventVersion int64     `json:"event_version"`
		Error        string    `json:"error"`
		Status       string    `json:"status"`
	} `json:"dead_letter"`
	Event *struct {
		ID        uuid.UUID       `json:"id"`
		Type      string          `json:"type"`
		Version   int64           `json:"version"`
		CreatedAt *time.Time      `json:"created_at"`
		Data      json.RawMessage `json:"data"`
		Metadata  json.RawMessage `json:"metadata"`
	} `json:"event"`
}

// requeueBulkJSON is the JSON of a bulk dead-letters requeue.
type requeueBulkJSON struct {
	Requeued     int            `json:"requeued"`
	Since        *time.Time     `json:"since"`
	Generation   string         `json:"generation"`
	Perspectives []requeuedJSON `json:"perspectives"`
}

type requeuedJSON struct {
	Perspective string `json:"perspective"`
	Requeued    int    `json:"requeued"`
}

// outcomesJSON is the JSON of dead-letters requeue and ignore.
type outcomesJSON struct {
	Results []struct {
		ID      uuid.UUID `json:"id"`
		Outcome string    `json:"outcome"`
		Error   string    `json:"error"`
	} `json:"results"`
}

func TestDeadLetters(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		*db
		b   ports.Backend
		dls []ports.DeadLetter
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		d := migratedDB(t)
		b := d.backend(t)
		return &testBundle{db: d, b: b, dls: deadLetters(t, b)}
	}
	status := func(t *testing.T, tb *testBundle, id uuid.UUID) ports.DeadLetterStatus {
		t.Helper()
		dls, err := tb.b.DeadLetters.DeadLettersList(t.Context(), &ports.DeadLettersListParams{})
		require.NoError(t, err)
		for _, dl := range dls {
			if dl.ID == id {
				return dl.Status
			}
		}
		t.Fatalf("no dead letter %s", id)
		return ""
	}
	listJSON := func(t *testing.T, tb *testBundle, args ...string) deadLettersJSON {
		t.Helper()
		res := tb.run(t, append([]string{"dead-letters", "list", "--json"}, args...)...)
		require.Equal(t, cli.ExitOK, res.code, res.stderr)
		var got deadLettersJSON
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
		return got
	}

	t.Run("List", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		res := tb.run(t, "dead-letters", "list")
		require.Equal(t, cli.ExitOK, res.code)
		golden(t, "dead_letters_list", mask(res.stdout, tb.schema, orderStream.String()))

		got := listJSON(t, tb)
		require.False(t, got.Truncated)
		require.Len(t, got.DeadLetters, 2)
		for i, dl := range got.DeadLetters {
			want := tb.dls[i]
			require.Equal(t, want.ID, dl.ID)
			require.Equal(t, want.WorkID, dl.WorkID)
			require.Equal(t, orderStream, dl.StreamID)
			require.Equal(t, "order_summary", dl.Perspective)
			require.Equal(t, want.EventID, dl.EventID)
			require.Equal(t, int64(2*i+2), dl.EventVersion)
			require.Equal(t, 1, dl.Attempts)
			require.Equal(t, ports.ReasonFailed, dl.Reason)
			require.Contains(t, dl.Error, errGateway.Error())
			require.NotNil(t, dl.InstanceID)
			require.Equal(t, want.InstanceID, *dl.InstanceID)
			require.True(t, want.DeadLetteredAt.Equal(*dl.DeadLetteredAt))
			require.Equal(t, "dead", dl.Status)
			require.Zero(t, dl.Requeues)
			require.Nil(t, dl.RequeuedAt)
			require.Nil(t, dl.ResolvedAt)
		}
	})
	t.Run("ListFilters", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		require.Empty(t, listJSON(t, tb, "--perspective", "customer_stats").DeadLetters)
		require.Len(t, listJSON(t, tb, "--perspective", "order_summary").DeadLetters, 2)
		require.Len(t, listJSON(t, tb, "--stream", orderStream.String()).DeadLetters, 2)
		require.Empty(t, listJSON(t, tb, "--stream", uuid.NewString()).DeadLetters)

		limited := listJSON(t, tb, "--limit", "1")
		require.True(t, limited.Truncated, "another one matches")
		require.Len(t, limited.DeadLetters, 1)
		require.Equal(t, tb.dls[0].ID, limited.DeadLetters[0].ID, "the oldest")
		res := tb.run(t, "dead-letters", "list", "--limit", "1")
		require.Equal(t, cli.ExitOK, res.code)
		require.Contains(t, res.stderr, "more dead letters match")
		require.False(t, listJSON(t, tb, "--limit", "2").Truncated)
		require.Len(t, listJSON(t, tb, "--limit", "0").DeadLetters, 2)

		// --since: a time, a duration back on the database's clock.
		second := tb.dls[1].DeadLetteredAt
		since := listJSON(t, tb, "--since", second.Format(time.RFC3339Nano))
		require.Len(t, since.DeadLetters, 1)
		require.Equal(t, tb.dls[1].ID, since.DeadLetters[0].ID)
		require.Len(t, listJSON(t, tb, "--since", "1h").DeadLetters, 2)
		require.Empty(t, listJSON(t, tb, "--since", second.Add(time.Second).Format(time.RFC3339Nano)).DeadLetters)
		sinceLimited := listJSON(t, tb, "--since", "2000-01-01", "--limit", "1")
		require.True(t, sinceLimited.Truncated)
		require.Len(t, sinceLimited.DeadLetters, 1)

		// Statuses: only the waiting ones unless asked.
		require.Equal(t, cli.ExitOK, tb.run(t, "dead-letters", "ignore", tb.dls[0].ID.String()).code)
		require.Len(t, listJSON(t, tb).DeadLetters, 1)
		require.Len(t, listJSON(t, tb, "--status", "ignored").DeadLetters, 1)
		require.Len(t, listJSON(t, tb, "--status", "all").DeadLetters, 2)
	})
	t.Run("Show", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		first := tb.dls[0]
		res := tb.run(t, "dead-letters", "show", first.ID.String())
		require.Equal(t, cli.ExitOK, res.code, res.stderr)
		golden(t, "dead_letters_show", mask(res.stdout, tb.schema, orderStream.String()))
		require.Contains(t, res.stdout, "  "+errGateway.Error()+"\n", "the error in full, on its own line")

		res = tb.run(t, "dl", "show", first.ID.String(), "--json")
		require.Equal(t, cli.ExitOK, res.code, res.stderr)
		var got deadLetterJSON
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
		require.Equal(t, first.ID, got.DeadLetter.ID)
		require.Equal(t, first.WorkID, got.DeadLetter.WorkID)
		require.Equal(t, orderStream, got.DeadLetter.StreamID)
		require.Equal(t, "order_summary", got.DeadLetter.Perspective)
		require.Equal(t, first.EventID, got.DeadLetter.EventID)
		require.Equal(t, int64(2), got.DeadLetter.EventVersion)
		require.Equal(t, first.Error, got.DeadLetter.Error, "the error in full")
		require.Equal(t, "dead", got.DeadLetter.Status)
		require.NotNil(t, got.Event)
		require.Equal(t, first.EventID, got.Event.ID)
		require.Equal(t, "payment_failed", got.Event.Type)
		require.Equal(t, int64(2), got.Event.Version)
		require.NotNil(t, got.Event.CreatedAt)
		require.JSONEq(t, `{"Reason": "card"}`, string(got.Event.Data))
		var meta ports.Metadata
		require.NoError(t, json.Unmarshal(got.Event.Metadata, &meta), "metadata decodes as ports.Metadata")

		res = tb.run(t, "dead-letters", "show", uuid.NewString())
		require.Equal(t, cli.ExitNotFound, res.code)
		require.Contains(t, res.stderr, "no dead letter has id")
		require.Empty(t, res.stdout)
	})
	t.Run("Requeue", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		first, second := tb.dls[0].ID, tb.dls[1].ID
		res := tb.run(t, "dead-letters", "requeue", first.String(), "--generation", "v2")
		require.Equal(t, cli.ExitOK, res.code)
		require.Equal(t, "requeued "+first.String()+"\n", res.stdout)
		require.Equal(t, ports.DeadLetterRequeued, status(t, tb, first))
		requeued := listJSON(t, tb, "--status", "requeued").DeadLetters
		require.Len(t, requeued, 1)
		require.Equal(t, "v2", requeued[0].RequeueGeneration)
		require.Equal(t, 1, requeued[0].Requeues)

		// A requeued one is refused, an unknown id not found; the others
		// are still requeued, and the exit code is the gravest failure's.
		unknown := uuid.New()
		res = tb.run(t, "dead-letters", "requeue", "--json", first.String(), unknown.String(), second.String())
		require.Equal(t, cli.ExitNotFound, res.code)
		var got outcomesJSON
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
		require.Len(t, got.Results, 3)
		require.Equal(t, first, got.Results[0].ID)
		require.Equal(t, "refused", got.Results[0].Outcome)
		require.Contains(t, got.Results[0].Error, "requeued")
		require.Equal(t, unknown, got.Results[1].ID)
		require.Equal(t, "not_found", got.Results[1].Outcome)
		require.Equal(t, second, got.Results[2].ID)
		require.Equal(t, "requeued", got.Results[2].Outcome)
		require.Empty(t, got.Results[2].Error)
		require.Contains(t, res.stderr, "2 of 3 dead letters not requeued")
		require.Equal(t, ports.DeadLetterRequeued, status(t, tb, second))

		res = tb.run(t, "dead-letters", "requeue", first.String())
		require.Equal(t, cli.ExitRefused, res.code)
		golden(t, "dead_letters_requeue_refused", mask(res.stdout, tb.schema))
	})
	t.Run("RequeuePerspective", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		first, second := tb.dls[0].ID, tb.dls[1].ID

		res := tb.run(t, "dead-letters", "requeue", "--perspective", "order_summary")
		require.Equal(t, cli.ExitRefused, res.code, "no terminal, no --yes")
		require.Contains(t, res.stderr, "a bulk requeue needs a confirmation: pass --yes")
		require.Empty(t, res.stdout)
		tb.env = cli.Env{Interactive: true, Stdin: strings.NewReader("n\n")}
		res = tb.run(t, "dead-letters", "requeue", "--perspective", "order_summary")
		require.Equal(t, cli.ExitRefused, res.code, "declined")
		require.Contains(t, res.stderr, `Requeue 2 waiting dead letters of perspective "order_summary" in schema "`+tb.schema+`"?`)
		require.Equal(t, ports.DeadLetterDead, status(t, tb, first), "nothing was requeued")

		// --since keeps the second only.
		tb.env = cli.Env{Interactive: true, Stdin: strings.NewReader("y\n")}
		since := tb.dls[1].DeadLetteredAt
		res = tb.run(t, "dead-letters", "requeue", "--perspective", "order_summary", "--since", since.Format(time.RFC3339Nano),
			"--generation", "v2", "--json")
		require.Equal(t, cli.ExitOK, res.code, res.stderr)
		require.Contains(t, res.stderr, "Requeue 1 waiting dead letter of perspective")
		var got requeueBulkJSON
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
		require.Equal(t, 1, got.Requeued)
		require.True(t, since.Equal(*got.Since))
		require.Equal(t, "v2", got.Generation)
		require.Equal(t, []requeuedJSON{{Perspective: "order_summary", Requeued: 1}}, got.Perspectives)
		require.Equal(t, ports.DeadLetterDead, status(t, tb, first))
		require.Equal(t, ports.DeadLetterRequeued, status(t, tb, second))

		tb.env = cli.Env{}
		res = tb.run(t, "dl", "requeue", "--perspective", "order_summary", "-y")
		require.Equal(t, cli.ExitOK, res.code)
		require.Equal(t, "requeued 1 dead letter of perspective \"order_summary\"\n", res.stdout)
		require.Equal(t, ports.DeadLetterRequeued, status(t, tb, first))
		res = tb.run(t, "dl", "requeue", "--perspective", "order_summary", "-y")
		require.Equal(t, cli.ExitOK, res.code)
		require.Equal(t, "no waiting dead letters of perspective \"order_summary\" to requeue\n", res.stdout)
		// Nothing to requeue needs no confirmation, terminal or not.
		res = tb.run(t, "dl", "requeue", "--perspective", "order_summary")
		require.Equal(t, cli.ExitOK, res.code, res.stderr)
		require.Equal(t, "no waiting dead letters of perspective \"order_summary\" to requeue\n", res.stdout)
	})
	t.Run("RequeueAll", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		invoice := handMadeDeadLetter(t, tb.b, "invoice_totals")
		legacy := handMadeDeadLetter(t, tb.b, "legacy_totals")
		_, err := tb.b.Admin.PerspectiveRetire(t.Context(), &ports.PerspectiveRetireParams{Perspective: "legacy_totals"})
		require.NoError(t, err)

		res := tb.run(t, "dead-letters", "requeue", "--perspective", "legacy_totals", "--yes")
		require.Equal(t, cli.ExitRefused, res.code)
		require.Contains(t, res.stderr, `perspective "legacy_totals" is retired: revive it`)

		tb.env = cli.Env{Interactive: true, Stdin: strings.NewReader("y\n")}
		res = tb.run(t, "dead-letters", "requeue", "--all")
		require.Equal(t, cli.ExitOK, res.code, res.stderr)
		require.Contains(t, res.stderr, `Requeue 3 waiting dead letters of 2 perspectives (invoice_totals, order_summary)`)
		require.Contains(t, res.stderr, `skipped 1 waiting dead letter of retired perspective "legacy_totals"`)
		require.Equal(t, `requeued 1 dead letter of perspective "invoice_totals"
requeued 2 dead letters of perspective "order_summary"
requeued 3 dead letters of 2 perspectives
`, res.stdout)
		for _, id := range []uuid.UUID{invoice.ID, tb.dls[0].ID, tb.dls[1].ID} {
			require.Equal(t, ports.DeadLetterRequeued, status(t, tb, id))
		}
		require.Equal(t, ports.DeadLetterDead, status(t, tb, legacy.ID), "a retired perspective's dead letters stay")

		tb.env = cli.Env{}
		res = tb.run(t, "dead-letters", "requeue", "--all", "--yes", "--json")
		require.Equal(t, cli.ExitOK, res.code)
		require.JSONEq(t, `{"requeued": 0, "since": null, "generation": "", "perspectives": []}`, res.stdout)
	})
	t.Run("Ignore", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		first, second := tb.dls[0].ID, tb.dls[1].ID
		res := tb.run(t, "dead-letters", "ignore", first.String(), first.String())
		require.Equal(t, cli.ExitOK, res.code)
		require.Equal(t, "ignored "+first.String()+"\n", res.stdout, "a repeated id is acted on once")
		require.Equal(t, ports.DeadLetterIgnored, status(t, tb, first))
		require.Equal(t, cli.ExitOK, tb.run(t, "dead-letters", "ignore", first.String()).code, "ignoring is idempotent")

		require.Equal(t, cli.ExitOK, tb.run(t, "dl", "requeue", second.String()).code)
		res = tb.run(t, "dead-letters", "ignore", second.String())
		require.Equal(t, cli.ExitRefused, res.code, "a requeued one is not ignored")
		require.Equal(t, ports.DeadLetterRequeued, status(t, tb, second))

		res = tb.run(t, "dead-letters", "ignore", uuid.NewString())
		require.Equal(t, cli.ExitNotFound, res.code)
		require.Contains(t, res.stdout, "no dead letter has this id")
	})
	t.Run("BadIDsChangeNothing", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		res := tb.run(t, "dead-letters", "requeue", tb.dls[0].ID.String(), "not-a-uuid")
		require.Equal(t, cli.ExitUsage, res.code)
		require.Contains(t, res.stderr, `"not-a-uuid"`)
		require.Empty(t, res.stdout)
		require.Equal(t, ports.DeadLetterDead, status(t, tb, tb.dls[0].ID), "nothing was requeued")
	})
}
