package faults

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/vantage-go/vantage/ports"
)

// Names of the checks, as reported in findings.
const (
	// CheckLost: an event never applied and not dead-lettered, with no
	// later event of its stream applied.
	CheckLost = "lost"
	// CheckSkipped: an event missing from a model that applied a later
	// event of its stream, not explained by a dead letter; or an event
	// applied after a later one (out of order).
	CheckSkipped = "skipped"
	// CheckDouble: an event applied twice (or a version the stream does
	// not have).
	CheckDouble = "double"
	// CheckHealthyDeadLettered: a dead letter for an event that carried no
	// fault instruction.
	CheckHealthyDeadLettered = "healthy-dead-lettered"
	// CheckDeadLetterRecord: the dead letter of a fault event does not say
	// what happened: its reason, its error, its attempts (all of them,
	// Retries.MaxEventAttempts) or the generation it failed on.
	CheckDeadLetterRecord = "dead-letter-record"
	// CheckFaultOutcome: a fault event that should have been dead-lettered
	// (its apply fails, or outlives its deadline) was applied.
	CheckFaultOutcome = "fault-outcome"
	// CheckCaughtUp: work was still pending when the bounded wait ended.
	CheckCaughtUp = "caught-up"
	// CheckRecovery: the healthy lag stayed above the threshold longer
	// than the scenario's budget, or never came back under it.
	CheckRecovery = "recovery"
	// CheckBaseline: the healthy lag was above the threshold before the
	// fault was injected, so the run measures nothing.
	CheckBaseline = "baseline"
	// CheckDeadlock: PostgreSQL logged "deadlock detected" during the run.
	CheckDeadlock = "deadlock"
	// CheckWorkerExit: a worker process exited without being asked to, or
	// the race detector reported a data race in one.
	CheckWorkerExit = "worker-exit"
	// CheckStep: a step of the scenario failed or did not happen in time:
	// the fault could not be injected, a poison event was not
	// dead-lettered within its bound, ... (the other checks still run).
	CheckStep = "step"
	// CheckPairContinues: after a dead letter, a later event of the same
	// stream was not applied in time.
	CheckPairContinues = "pair-continues"
	// CheckGenerationRequeue: the workers of a new generation did not
	// requeue the dead letters of the previous one in time.
	CheckGenerationRequeue = "generation-requeue"
	// CheckCleanReplay: after the requeue with the fix, a model (or the
	// projection's rows) differs from a replay of every event of its
	// stream in order.
	CheckCleanReplay = "clean-replay"
	// CheckCharged: a backend fault injected into a healthy event's
	// processing (its connection cut during its projection write) was
	// charged to the event as a failed attempt.
	CheckCharged = "charged"
	// CheckTakeover: by the end of a worker's pause, the others had not
	// abandoned it, or it still held streams.
	CheckTakeover = "takeover"
	// CheckResume: a worker resumed after its pause applied nothing within
	// the stale threshold.
	CheckResume = "resume"
)

// Finding is one violation found by a check.
type Finding struct {
	Check       string    `json:"check"`
	Stream      uuid.UUID `json:"stream,omitzero"`
	Perspective string    `json:"perspective,omitempty"`
	Version     int64     `json:"version,omitempty"`
	Detail      string    `json:"detail"`
}

func (f Finding) String() string {
	s := f.Check
	if f.Stream != uuid.Nil {
		s += ": stream " + f.Stream.String()
	}
	if f.Perspective != "" {
		s += " " + f.Perspective
	}
	if f.Version != 0 {
		s += fmt.Sprintf(" version %d", f.Version)
	}
	return s + ": " + f.Detail
}

// Counts are the event-level results of a run, per (stream, perspective,
// event).
type Counts struct {
	Lost                int `json:"lost"`
	Skipped             int `json:"skipped"`
	Double              int `json:"double"`
	HealthyDeadLettered int `json:"healthy_dead_lettered"`
}

func (c *Counts) add(o Counts) {
	c.Lost += o.Lost
	c.Skipped += o.Skipped
	c.Double += o.Double
	c.HealthyDeadLettered += o.HealthyDeadLettered
}

// eventKey names an event by stream and version.
type eventKey struct {
	stream  uuid.UUID
	version int64
}

// storedEvent is an event as the checks see it.
type storedEvent struct {
	version int64
	fault   string
}

// dataset is what the database holds at the end of a run.
type dataset struct {
	events  map[uuid.UUID][]storedEvent // by stream, in version order
	history map[uuid.UUID][]int64       // HistoryPerspective's versions
	counts  map[uuid.UUID]int64         // CountPerspective's count
	rows    map[uuid.UUID][]int64       // RowsTable's versions, in write order
	dead    []ports.DeadLetter          // every dead letter, any status
	// pending holds the work rows still pending, per perspective.
	pending map[string]map[eventKey]bool
}

// loadDataset reads the run's events, models and dead letters.
func loadDataset(ctx context.Context, pool *pgxpool.Pool, dls ports.DeadLetterStore, schema string) (*dataset, error) {
	d := &dataset{
		events:  map[uuid.UUID][]storedEvent{},
		history: map[uuid.UUID][]int64{},
		counts:  map[uuid.UUID]int64{},
		rows:    map[uuid.UUID][]int64{},
		pending: map[string]map[eventKey]bool{},
	}
	rows, err := pool.Query(ctx, `SELECT stream_id, version, coalesce(data->>'fault', '') FROM `+
		pgx.Identifier{schema, "vantage_events"}.Sanitize()+` ORDER BY stream_id, version`)
	if err != nil {
		return nil, fmt.Errorf("reading events: %w", err)
	}
	var (
		stream uuid.UUID
		ev     storedEvent
	)
	if _, err := pgx.ForEachRow(rows, []any{&stream, &ev.version, &ev.fault}, func() error {
		d.events[stream] = append(d.events[stream], ev)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading events: %w", err)
	}
	rows, err = pool.Query(ctx, `SELECT stream_id, perspective, data FROM `+pgx.Identifier{schema, "vantage_models"}.Sanitize())
	if err != nil {
		return nil, fmt.Errorf("reading models: %w", err)
	}
	var (
		perspective string
		data        []byte
	)
	if _, err := pgx.ForEachRow(rows, []any{&stream, &perspective, &data}, func() error {
		switch perspective {
		case HistoryPerspective:
			var h History
			if err := json.Unmarshal(data, &h); err != nil {
				return fmt.Errorf("decoding %s model of stream %s: %w", perspective, stream, err)
			}
			d.history[stream] = h.Versions
		case CountPerspective:
			var c Count
			if err := json.Unmarshal(data, &c); err != nil {
				return fmt.Errorf("decoding %s model of stream %s: %w", perspective, stream, err)
			}
			d.counts[stream] = c.N
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading models: %w", err)
	}
	rows, err = pool.Query(ctx, `SELECT stream_id, version FROM `+pgx.Identifier{schema, RowsTable}.Sanitize()+` ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", RowsTable, err)
	}
	if _, err := pgx.ForEachRow(rows, []any{&stream, &ev.version}, func() error {
		d.rows[stream] = append(d.rows[stream], ev.version)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading %s: %w", RowsTable, err)
	}
	rows, err = pool.Query(ctx, `SELECT stream_id, perspective, event_version FROM `+
		pgx.Identifier{schema, "vantage_work"}.Sanitize()+` WHERE processed_at IS NULL`)
	if err != nil {
		return nil, fmt.Errorf("reading pending work: %w", err)
	}
	var version int64
	if _, err := pgx.ForEachRow(rows, []any{&stream, &perspective, &version}, func() error {
		if d.pending[perspective] == nil {
			d.pending[perspective] = map[eventKey]bool{}
		}
		d.pending[perspective][eventKey{stream, version}] = true
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading pending work: %w", err)
	}
	d.dead, err = dls.DeadLettersList(ctx, &ports.DeadLettersListParams{})
	if err != nil {
		return nil, fmt.Errorf("listing dead letters: %w", err)
	}
	return d, nil
}

// isDead reports whether a dead letter stands for its event: waiting or
// given up on. One that was requeued or recovered no longer explains an
// event missing from a model.
func isDead(dl ports.DeadLetter) bool {
	switch dl.Status {
	case "", ports.DeadLetterDead, ports.DeadLetterIgnored: // "": adapters without statuses
		return true
	}
	return false
}

// failsForGood reports whether an event with this fault instruction must
// end dead-lettered: its apply fails on every attempt, or runs past its
// deadline on every attempt (an apply that succeeds after its deadline is
// discarded).
func failsForGood(fault string) bool {
	switch fault {
	case FaultPoison, FaultHangCtx, FaultHang, FaultUndecodable:
		return true
	}
	return false
}

// Deploy generations: the suite's workers start as failedGeneration, so
// every dead letter of a fault event records it; the requeue scenario
// deploys fixedGeneration, with the fix.
const (
	failedGeneration = "v1"
	fixedGeneration  = "v2"
)

// deadLetterRecord returns what is wrong with the dead letter of an event
// carrying fault, "" when nothing is.
func deadLetterRecord(dl ports.DeadLetter, fault string) string {
	var reason, errText string
	switch fault {
	case FaultPoison:
		reason, errText = ports.ReasonFailed, errPoison.Error()
	case FaultUndecodable:
		reason, errText = ports.ReasonUndecodable, "decoding"
	case FaultHangCtx, FaultHang:
		reason = ports.ReasonTimedOut
	default:
		return ""
	}
	var wrong []string
	if dl.Reason != reason {
		wrong = append(wrong, fmt.Sprintf("reason %q, want %q", dl.Reason, reason))
	}
	if !strings.Contains(dl.Error, errText) || dl.Error == "" {
		wrong = append(wrong, fmt.Sprintf("error %q, want the apply's error (containing %q)", dl.Error, errText))
	}
	if dl.Attempts != maxAttempts {
		wrong = append(wrong, fmt.Sprintf("%d attempts, want %d", dl.Attempts, maxAttempts))
	}
	if dl.Generation != failedGeneration {
		wrong = append(wrong, fmt.Sprintf("generation %q, want %q", dl.Generation, failedGeneration))
	}
	return strings.Join(wrong, "; ")
}

// check compares every model with its stream's events and dead letters.
// mustApply holds fault events that must end applied (requeued after the
// fix), so no dead letter explains their absence.
func check(d *dataset, mustApply map[eventKey]bool) (Counts, []Finding) {
	var (
		c        Counts
		findings []Finding
	)
	add := func(counter *int, f Finding) {
		*counter++
		findings = append(findings, f)
	}
	dead := map[string]map[eventKey]ports.DeadLetter{}
	for _, p := range Perspectives {
		dead[p] = map[eventKey]ports.DeadLetter{}
	}
	faults := map[eventKey]string{}
	for stream, evs := range d.events {
		for _, e := range evs {
			faults[eventKey{stream, e.version}] = e.fault
		}
	}
	for _, dl := range d.dead {
		k := eventKey{dl.StreamID, dl.EventVersion}
		if fault, known := faults[k]; known && fault == "" {
			add(&c.HealthyDeadLettered, Finding{Check: CheckHealthyDeadLettered, Stream: dl.StreamID, Perspective: dl.Perspective, Version: dl.EventVersion,
				Detail: fmt.Sprintf("healthy event dead-lettered (reason %s, %d attempts, status %q): %s", dl.Reason, dl.Attempts, dl.Status, dl.Error)})
		}
		if fault := faults[k]; fault != "" {
			if wrong := deadLetterRecord(dl, fault); wrong != "" {
				findings = append(findings, Finding{Check: CheckDeadLetterRecord, Stream: dl.StreamID, Perspective: dl.Perspective, Version: dl.EventVersion,
					Detail: fmt.Sprintf("dead letter of the %s event: %s", fault, wrong)})
			}
		}
		if isDead(dl) && dead[dl.Perspective] != nil {
			dead[dl.Perspective][k] = dl
		}
	}
	for _, stream := range slices.SortedFunc(maps.Keys(d.events), func(a, b uuid.UUID) int { return cmp.Compare(a.String(), b.String()) }) {
		evs := d.events[stream]

		// HistoryPerspective and RowsProjection: which events, in which
		// order.
		for _, o := range []struct {
			perspective string
			versions    []int64
		}{{HistoryPerspective, d.history[stream]}, {RowsProjection, d.rows[stream]}} {
			c.add(checkOrdered(stream, evs, o.perspective, o.versions, dead[o.perspective], d.pending[o.perspective], mustApply, &findings))
		}

		// CountPerspective: how many.
		want := int64(0)
		for _, e := range evs {
			k := eventKey{stream, e.version}
			if _, isDL := dead[CountPerspective][k]; !isDL || mustApply[k] {
				want++
			}
		}
		got := d.counts[stream]
		switch {
		case got < want:
			c.Lost += int(want - got)
			findings = append(findings, Finding{Check: CheckLost, Stream: stream, Perspective: CountPerspective,
				Detail: fmt.Sprintf("counted %d events, want %d (%d events, the rest dead-lettered)", got, want, len(evs))})
		case got > want:
			c.Double += int(got - want)
			findings = append(findings, Finding{Check: CheckDouble, Stream: stream, Perspective: CountPerspective,
				Detail: fmt.Sprintf("counted %d events, want %d (%d events, the rest dead-lettered)", got, want, len(evs))})
		}
	}
	return c, findings
}

// describe names an event's fault instruction for findings.
func describe(fault string) string {
	if fault == "" {
		return "healthy event"
	}
	return fault + " event"
}

// cleanReplay reports how a stream's models and projection rows differ
// from a replay of every one of its events in order (versions 1 to n), ""
// when they do not.
func cleanReplay(d *dataset, stream uuid.UUID) string {
	n := int64(len(d.events[stream]))
	want := make([]int64, n)
	for i := range want {
		want[i] = int64(i) + 1
	}
	switch {
	case !slices.Equal(d.history[stream], want):
		return fmt.Sprintf("%s is %s, want 1..%d in order", HistoryPerspective, abbreviate(d.history[stream]), n)
	case !slices.Equal(d.rows[stream], want):
		return fmt.Sprintf("%s holds %s, want 1..%d in order", RowsTable, abbreviate(d.rows[stream]), n)
	case d.counts[stream] != n:
		return fmt.Sprintf("%s is %d, want %d", CountPerspective, d.counts[stream], n)
	}
	return ""
}

// abbreviate prints a versions list, eliding the middle of long ones.
func abbreviate(vs []int64) string {
	if len(vs) <= 12 {
		return fmt.Sprint(vs)
	}
	return fmt.Sprintf("%v … %v (%d versions)", vs[:6], vs[len(vs)-6:], len(vs))
}

// checkOrdered checks the versions a perspective applied to stream, in the
// order it applied them, against the stream's events evs and the
// perspective's dead letters and pending rows; it appends its findings.
func checkOrdered(stream uuid.UUID, evs []storedEvent, perspective string, versions []int64,
	dead map[eventKey]ports.DeadLetter, pending map[eventKey]bool, mustApply map[eventKey]bool, findings *[]Finding,
) Counts {
	var c Counts
	add := func(counter *int, f Finding) {
		*counter++
		*findings = append(*findings, f)
	}
	has := map[int64]bool{}
	for _, e := range evs {
		has[e.version] = true
	}
	seen := map[int64]bool{}
	var top int64
	for _, v := range versions {
		f := Finding{Stream: stream, Perspective: perspective, Version: v}
		switch {
		case !has[v]:
			f.Check, f.Detail = CheckDouble, "applied a version the stream does not have"
			add(&c.Double, f)
		case seen[v]:
			f.Check, f.Detail = CheckDouble, "applied twice"
			add(&c.Double, f)
		case v < top:
			f.Check, f.Detail = CheckSkipped, fmt.Sprintf("applied after version %d (out of order)", top)
			add(&c.Skipped, f)
		}
		seen[v] = true
		top = max(top, v)
	}
	for _, e := range evs {
		k := eventKey{stream, e.version}
		f := Finding{Stream: stream, Perspective: perspective, Version: e.version}
		_, isDL := dead[k]
		switch {
		case seen[e.version]:
			if failsForGood(e.fault) && !mustApply[k] {
				f.Check, f.Detail = CheckFaultOutcome, fmt.Sprintf("%s event applied; want dead-lettered", e.fault)
				*findings = append(*findings, f)
			}
		case mustApply[k]:
			f.Check, f.Detail = CheckLost, fmt.Sprintf("%s event requeued after the fix but never applied", e.fault)
			if e.version < top {
				f.Check = CheckSkipped
				add(&c.Skipped, f)
			} else {
				add(&c.Lost, f)
			}
		case isDL:
		case e.version < top:
			f.Check, f.Detail = CheckSkipped, fmt.Sprintf("missing, version %d applied, no dead letter (%s)", top, describe(e.fault))
			add(&c.Skipped, f)
		case pending[k]:
			f.Check, f.Detail = CheckLost, fmt.Sprintf("never applied, still pending (%s)", describe(e.fault))
			add(&c.Lost, f)
		default:
			f.Check, f.Detail = CheckLost, fmt.Sprintf("never applied, not dead-lettered, no work row left (%s)", describe(e.fault))
			add(&c.Lost, f)
		}
	}
	return c
}
