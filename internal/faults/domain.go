package faults

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

// Names stored with the suite's events, work rows and models.
const (
	// EventType is the type name of Step, the suite's only event type.
	EventType = "faults.step"
	// HistoryPerspective records, per stream, the version of every event
	// it applied, in the order applied (History).
	HistoryPerspective = "fault_history"
	// CountPerspective counts the events it applied (Count).
	CountPerspective = "fault_count"
	// RowsProjection is a table projection: it writes one row per event
	// it applied into RowsTable of the run's schema (see NewRegistry).
	RowsProjection = "fault_rows"
	// RowsTable is the table of RowsProjection: id (the order of the
	// writes), stream_id and version. No key on (stream_id, version): an
	// event written twice shows as two rows, one never written as none.
	RowsTable = "fault_rows"
)

// Perspectives are the perspectives the workers run.
var Perspectives = []string{HistoryPerspective, CountPerspective, RowsProjection}

// Fault instructions a Step can carry in its Fault field.
const (
	// FaultPoison makes the apply return an error (unless the worker runs
	// with the fix, -fixed).
	FaultPoison = "poison"
	// FaultHangCtx makes the apply block until its context is done, then
	// return the context's error.
	FaultHangCtx = "hang_ctx"
	// FaultHang makes the apply block for HangMS milliseconds ignoring its
	// context, then succeed.
	FaultHang = "hang"
	// FaultUndecodable marks a payload that does not decode into Step: it
	// is appended as raw JSON (see undecodablePayload), never through the
	// registry, and no apply function ever sees it.
	FaultUndecodable = "undecodable"
)

// Step is the suite's event. A Step without Fault is healthy.
type Step struct {
	// Seq is unique within a run: an appender that lost the outcome of an
	// append looks its Seq up to learn whether it was stored.
	Seq int64 `json:"seq"`
	// Fault is the fault instruction, empty for a healthy event.
	Fault string `json:"fault,omitempty"`
	// HangMS is how long a FaultHang apply blocks.
	HangMS int64 `json:"hang_ms,omitempty"`
	// WriteMS, on a healthy event, makes RowsProjection's write of it run
	// a statement that sleeps WriteMS milliseconds in PostgreSQL, marked
	// with the event's Seq (see slowWriteMarker), so the suite can find
	// the write in pg_stat_activity and cut its connection. The event
	// stays healthy: a slow write within ApplyTimeout is no fault.
	WriteMS int64 `json:"write_ms,omitempty"`
}

// slowWriteMarker starts the statement of a slow write (Step.WriteMS),
// followed by the event's seq and the end of the comment: the suite finds
// the writes in flight by it (pg_stat_activity.query).
const slowWriteMarker = "/* vantage-faults slow write seq="

// slowWriteSQL is the statement of the slow write of the event with seq:
// $1 is the sleep in seconds.
func slowWriteSQL(seq int64) string {
	return fmt.Sprintf("%s%d */ SELECT pg_sleep($1)", slowWriteMarker, seq)
}

// slowWriteSeq returns the seq of the event whose slow write query is (a
// statement of slowWriteSQL), and false for any other statement.
func slowWriteSeq(query string) (int64, bool) {
	rest, ok := strings.CutPrefix(query, slowWriteMarker)
	if !ok {
		return 0, false
	}
	digits, _, _ := strings.Cut(rest, " ")
	seq, err := strconv.ParseInt(digits, 10, 64)
	return seq, err == nil
}

// rowsTableSQL creates RowsTable in schema, unless it exists.
func rowsTableSQL(schema string) string {
	t := pgx.Identifier{schema, RowsTable}.Sanitize()
	return `CREATE TABLE IF NOT EXISTS ` + t + ` (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    stream_id uuid   NOT NULL,
    version   bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS fault_rows_stream_idx ON ` + t + ` (stream_id, id)`
}

// undecodablePayload is a Step whose seq is a string: valid JSON that does
// not decode into Step, with the fault readable by the checks and the seq
// by an appender looking for it (as the text "u<seq>").
func undecodablePayload(seq int64) []byte {
	return fmt.Appendf(nil, `{"seq": "u%d", "fault": %q}`, seq, FaultUndecodable)
}

// History is the model of HistoryPerspective: the versions applied, in
// order, so the checks see lost, skipped, reordered and repeated events.
type History struct {
	Versions []int64 `json:"versions"`
}

// Count is the model of CountPerspective: how many events were applied.
type Count struct {
	N int64 `json:"n"`
}

// errPoison is what a poison event's apply returns.
var errPoison = errors.New("poison event")

// NewRegistry returns the registry of the workers and the appenders: Step,
// both model perspectives and RowsProjection, which writes RowsTable of
// schema (the table must exist before a worker applies an event). fixed
// makes poison events apply like healthy ones (the deploy with the fix).
func NewRegistry(schema string, fixed bool) (*core.Registry, error) {
	reg := core.NewRegistry()
	if err := core.RegisterEvent[Step](reg, EventType); err != nil {
		return nil, err
	}
	misbehave := func(ctx context.Context, s Step) error {
		switch s.Fault {
		case FaultPoison:
			if !fixed {
				return fmt.Errorf("%w (seq %d)", errPoison, s.Seq)
			}
		case FaultHangCtx:
			<-ctx.Done()
			return ctx.Err()
		case FaultHang:
			// Ignoring ctx is the fault: an apply stuck in code that does
			// not honour cancellation.
			time.Sleep(time.Duration(s.HangMS) * time.Millisecond)
		}
		return nil
	}
	history := core.NewPerspective[History](HistoryPerspective)
	if err := core.Handle(history, func(ctx context.Context, m History, s Step) (History, error) {
		if err := misbehave(ctx, s); err != nil {
			return m, err
		}
		ev, ok := core.EventFromContext(ctx)
		if !ok {
			return m, errors.New("no event in the apply context")
		}
		// Clip: never write into an array the engine's previous model
		// value may share, whatever the engine does with it.
		m.Versions = append(slices.Clip(m.Versions), ev.Version)
		return m, nil
	}); err != nil {
		return nil, err
	}
	count := core.NewPerspective[Count](CountPerspective)
	if err := core.Handle(count, func(ctx context.Context, m Count, s Step) (Count, error) {
		if err := misbehave(ctx, s); err != nil {
			return m, err
		}
		m.N++
		return m, nil
	}); err != nil {
		return nil, err
	}
	rows, err := newRowsProjection(schema, misbehave)
	if err != nil {
		return nil, err
	}
	for _, p := range []core.Registrable{history, count, rows} {
		if err := reg.AddPerspective(p); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// newRowsProjection returns RowsProjection: each event it applies inserts
// one row into RowsTable, in the transaction that moves its cursor; its
// reset deletes the stream's rows. It follows the fault instructions as
// the models do, except FaultHang: its write blocks in PostgreSQL
// (pg_sleep), where the write's deadline reaches it, as a statement stuck
// on a lock would. A write blocked in Go ignoring its context would hold
// the transaction, and the saves grouped with it, until it returned, as
// core.HandleTx documents: a hazard of the projection's code, not of the
// engine.
func newRowsProjection(schema string, misbehave func(context.Context, Step) error) (*core.Projection, error) {
	table := pgx.Identifier{schema, RowsTable}.Sanitize()
	rows := core.NewProjection(RowsProjection, func(ctx context.Context, tx ports.Tx, stream uuid.UUID) error {
		_, err := postgres.TxOf(tx).Exec(ctx, `DELETE FROM `+table+` WHERE stream_id = $1`, stream)
		return err
	})
	err := core.HandleTx(rows, func(ctx context.Context, tx ports.Tx, s Step) error {
		ev, ok := core.EventFromContext(ctx)
		if !ok {
			return errors.New("no event in the write context")
		}
		db := postgres.TxOf(tx)
		switch {
		case s.Fault == FaultHang:
			if _, err := db.Exec(ctx, `SELECT pg_sleep($1)`, float64(s.HangMS)/1000); err != nil {
				return fmt.Errorf("hanging in PostgreSQL: %w", err)
			}
		case s.Fault != "":
			if err := misbehave(ctx, s); err != nil {
				return err
			}
		case s.WriteMS > 0:
			if _, err := db.Exec(ctx, slowWriteSQL(s.Seq), float64(s.WriteMS)/1000); err != nil {
				return fmt.Errorf("writing slowly: %w", err)
			}
		}
		if _, err := db.Exec(ctx, `INSERT INTO `+table+` (stream_id, version) VALUES ($1, $2)`, ev.StreamID, ev.Version); err != nil {
			return fmt.Errorf("inserting the row of version %d: %w", ev.Version, err)
		}
		return nil
	})
	return rows, err
}
