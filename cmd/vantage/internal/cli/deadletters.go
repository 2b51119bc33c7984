package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/vantage-go/vantage/ports"
)

func (a *app) deadLettersCommand() *cobra.Command {
	cmd := groupCommand("dead-letters", "List, show, requeue or ignore dead letters",
		`A dead letter is an event a perspective failed to apply until the engine
gave up on it. It waits (status dead) until an operator requeues it, a new
deploy generation retries it, or an operator ignores it.

Statuses: dead (waiting), requeued (its work is pending again), recovered
(applied since), ignored (never retried).`,
		`  vantage dead-letters list --perspective order_summary
  vantage dead-letters show 0197a3c4-5b6e-7f80-9a1b-2c3d4e5f6a7b
  vantage dead-letters requeue 0197a3c4-5b6e-7f80-9a1b-2c3d4e5f6a7b
  vantage dl ignore 0197a3c4-5b6e-7f80-9a1b-2c3d4e5f6a7b`)
	cmd.Aliases = []string{"dl"}
	cmd.AddCommand(a.deadLettersListCommand(), a.deadLettersShowCommand(), a.deadLettersRequeueCommand(), a.deadLettersIgnoreCommand())
	return cmd
}

// DeadLettersLimitDefault is how many dead letters list shows unless
// --limit says otherwise.
const DeadLettersLimitDefault = 100

// listFlags are the flags of dead-letters list.
type listFlags struct {
	perspective string
	stream      string
	status      string
	since       string
	limit       int
}

func (a *app) deadLettersListCommand() *cobra.Command {
	var f listFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List dead letters, oldest first",
		Long: `List dead letters, oldest first by the time they were last dead-lettered,
with their cause. Without --status only the waiting ones (dead) are listed.

--since keeps those dead-lettered at or after a time: an RFC 3339 time
(2026-03-01T12:00:00Z), a date (2026-03-01, UTC), or a duration back from
now on the database's clock (90m, 36h). The database filters by
perspective, stream and status; --since is applied by vantage itself, after
reading every dead letter that the other filters keep.

At most --limit are shown (0: all); when more match, a note on stderr says
so. The error column is cut to one short line; --json has the full text.

JSON: {"truncated", "dead_letters": [{"id", "work_id", "stream_id",
"perspective", "event_id", "event_version", "attempts", "reason", "error",
"instance_id", "generation", "dead_lettered_at", "status", "requeues",
"requeued_at", "requeue_generation", "resolved_at"}]}; times are RFC 3339
UTC, null when unset; truncated is true when more dead letters match than
--limit.`,
		Example: `  vantage dead-letters list
  vantage dead-letters list --perspective order_summary --since 24h
  vantage dead-letters list --status all --limit 0 --json | jq -r '.dead_letters[].id'`,
		Args: cobra.NoArgs,
	}
	cmd.RunE = a.action(func(ctx context.Context, _ []string) error { return a.deadLettersList(ctx, f) })
	fl := cmd.Flags()
	fl.StringVar(&f.perspective, "perspective", "", "only the dead letters of this perspective")
	fl.StringVar(&f.stream, "stream", "", "only the dead letters of this stream (a UUID)")
	fl.StringVar(&f.status, "status", string(ports.DeadLetterDead), "dead, requeued, recovered, ignored, or all")
	fl.StringVar(&f.since, "since", "", "only those dead-lettered at or after: a time, a date, or a duration ago")
	fl.IntVar(&f.limit, "limit", DeadLettersLimitDefault, "show at most this many (0: all)")
	return cmd
}

// deadLetterView is a dead letter as the commands report it.
type deadLetterView struct {
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
}

func viewDeadLetter(dl ports.DeadLetter) deadLetterView {
	v := deadLetterView{
		ID:                dl.ID,
		WorkID:            dl.WorkID,
		StreamID:          dl.StreamID,
		Perspective:       dl.Perspective,
		EventID:           dl.EventID,
		EventVersion:      dl.EventVersion,
		Attempts:          dl.Attempts,
		Reason:            dl.Reason,
		Error:             dl.Error,
		Generation:        dl.Generation,
		DeadLetteredAt:    jsonTime(dl.DeadLetteredAt),
		Status:            string(dl.Status),
		Requeues:          dl.Requeues,
		RequeuedAt:        jsonTime(dl.RequeuedAt),
		RequeueGeneration: dl.RequeueGeneration,
		ResolvedAt:        jsonTime(dl.ResolvedAt),
	}
	if dl.InstanceID != uuid.Nil {
		id := dl.InstanceID
		v.InstanceID = &id
	}
	return v
}

type deadLettersReport struct {
	Truncated   bool             `json:"truncated"`
	DeadLetters []deadLetterView `json:"dead_letters"`
}

func (r *deadLettersReport) writeText(w io.Writer) {
	if len(r.DeadLetters) == 0 {
		fmt.Fprintln(w, "no dead letters")
		return
	}
	rows := make([][]string, len(r.DeadLetters))
	for i, dl := range r.DeadLetters {
		rows[i] = []string{dl.ID.String(), timeText(deref(dl.DeadLetteredAt)), cell(dl.Perspective), dl.StreamID.String(),
			strconv.FormatInt(dl.EventVersion, 10), strconv.Itoa(dl.Attempts), cell(dl.Reason), dl.Status, cell(dl.Error)}
	}
	writeTable(w, []string{"ID", "DEAD-LETTERED", "PERSPECTIVE", "STREAM", "VERSION", "ATTEMPTS", "REASON", "STATUS", "ERROR"}, rows)
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// params turns the flags of dead-letters list, --since excepted, into the
// port's filter.
func (f listFlags) params() (*ports.DeadLettersListParams, error) {
	p := &ports.DeadLettersListParams{Perspective: f.perspective}
	if f.stream != "" {
		id, err := uuid.Parse(f.stream)
		if err != nil {
			return nil, usageErrorf("--stream %q is not a UUID", f.stream)
		}
		p.StreamID = id
	}
	switch st := ports.DeadLetterStatus(f.status); st {
	case "all":
	case ports.DeadLetterDead, ports.DeadLetterRequeued, ports.DeadLetterRecovered, ports.DeadLetterIgnored:
		p.Status = st
	default:
		return nil, usageErrorf("--status %q must be dead, requeued, recovered, ignored or all", f.status)
	}
	if f.limit < 0 {
		return nil, usageErrorf("--limit must not be negative, got %d", f.limit)
	}
	return p, nil
}

// sinceFlag is a parsed --since: a time, or a duration back from now.
type sinceFlag struct {
	at  time.Time
	ago time.Duration
}

// parseSince reads --since: an RFC 3339 time, a date (UTC), or a positive
// duration back from now.
func parseSince(s string) (sinceFlag, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return sinceFlag{at: t}, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return sinceFlag{at: t}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return sinceFlag{ago: d}, nil
	}
	return sinceFlag{}, usageErrorf("--since %q is neither a time (2026-03-01T12:00:00Z), a date (2026-03-01) nor a positive duration (36h)", s)
}

func (a *app) deadLettersList(ctx context.Context, f listFlags) error {
	params, err := f.params()
	if err != nil {
		return err
	}
	var since sinceFlag
	if f.since != "" {
		if since, err = parseSince(f.since); err != nil {
			return err
		}
	}
	s, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	if since.ago > 0 {
		now, err := a.now(ctx, s)
		if err != nil {
			return err
		}
		since.at = now.Add(-since.ago)
	}
	if since.at.IsZero() && f.limit > 0 {
		params.Limit = f.limit + 1 // one more tells whether more match
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	dls, err := s.deadLetters.DeadLettersList(cctx, params)
	if err != nil {
		return err
	}
	r := &deadLettersReport{DeadLetters: []deadLetterView{}}
	for _, dl := range dls {
		if dl.DeadLetteredAt.Before(since.at) {
			continue
		}
		if f.limit > 0 && len(r.DeadLetters) == f.limit {
			r.Truncated = true
			break
		}
		r.DeadLetters = append(r.DeadLetters, viewDeadLetter(dl))
	}
	if err := a.print(r); err != nil {
		return err
	}
	if r.Truncated {
		a.notef("more dead letters match: showing the oldest %d; raise --limit, or 0 for all", f.limit)
	}
	return nil
}

func (a *app) deadLettersIgnoreCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ignore ID...",
		Short: "Ignore dead letters: never retry them",
		Long: `Mark each dead letter named ignored: no deploy generation retries it
('dead-letters requeue' still may). Ignoring an ignored one changes
nothing; a requeued or recovered one is refused.

Every id is tried, one at a time, and its outcome printed, with the exit
codes of 'dead-letters requeue'.

JSON: {"results": [{"id", "outcome", "error"}]}, outcome one of ignored,
not_found, refused, failed.`,
		Example: `  vantage dead-letters ignore 0197a3c4-5b6e-7f80-9a1b-2c3d4e5f6a7b`,
		Args:    cobra.MinimumNArgs(1),
	}
	cmd.RunE = a.action(func(ctx context.Context, args []string) error {
		return a.eachDeadLetter(ctx, args, "ignored", func(ctx context.Context, admin ports.Admin, id uuid.UUID) error {
			return admin.DeadLetterIgnore(ctx, &ports.DeadLetterIgnoreParams{ID: id})
		})
	})
	return cmd
}

// Outcomes of an action on one dead letter, besides its success.
const (
	outcomeNotFound = "not_found"
	outcomeRefused  = "refused"
	outcomeFailed   = "failed"
)

// outcomeView is what an action did to one dead letter.
type outcomeView struct {
	ID      uuid.UUID `json:"id"`
	Outcome string    `json:"outcome"`
	Error   string    `json:"error"`
}

type outcomesReport struct {
	Results []outcomeView `json:"results"`
}

func (r *outcomesReport) writeText(w io.Writer) {
	for _, o := range r.Results {
		switch o.Outcome {
		case outcomeNotFound:
			fmt.Fprintf(w, "not found %s: no dead letter has this id\n", o.ID)
		case outcomeRefused, outcomeFailed: // the error names the id
			fmt.Fprintf(w, "%s: %s\n", o.Outcome, o.Error)
		default:
			fmt.Fprintf(w, "%s %s\n", o.Outcome, o.ID)
		}
	}
}

// parseIDs parses the dead letter ids of the command line, dropping
// repeats; any malformed one fails as usage.
func parseIDs(args []string) ([]uuid.UUID, error) {
	var (
		ids  []uuid.UUID
		bad  []string
		seen = map[uuid.UUID]bool{}
	)
	for _, arg := range args {
		id, err := uuid.Parse(arg)
		if err != nil {
			bad = append(bad, strconv.Quote(arg))
			continue
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	if len(bad) > 0 {
		return nil, usageErrorf("not a dead letter id (a UUID): %s", strings.Join(bad, ", "))
	}
	return ids, nil
}

// eachDeadLetter applies act to every dead letter of args, one call each,
// prints the outcomes, and fails with the gravest (see exitGravity).
func (a *app) eachDeadLetter(ctx context.Context, args []string, done string,
	act func(ctx context.Context, admin ports.Admin, id uuid.UUID) error,
) error {
	ids, err := parseIDs(args)
	if err != nil {
		return err
	}
	s, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	r := &outcomesReport{Results: make([]outcomeView, 0, len(ids))}
	var (
		gravest error
		failed  int
	)
	for _, id := range ids {
		cctx, cancel := a.call(ctx)
		err := act(cctx, s.admin, id)
		cancel()
		o := outcomeView{ID: id, Outcome: done}
		if err != nil {
			failed++
			o.Error = err.Error()
			switch exitCode(err) {
			case ExitNotFound:
				o.Outcome = outcomeNotFound
			case ExitRefused:
				o.Outcome = outcomeRefused
			default:
				o.Outcome = outcomeFailed
			}
			if gravest == nil || exitGravity(exitCode(err)) > exitGravity(exitCode(gravest)) {
				gravest = err
			}
		}
		r.Results = append(r.Results, o)
	}
	if err := a.print(r); err != nil {
		return err
	}
	if gravest == nil {
		return nil
	}
	return &exitError{code: exitCode(gravest), err: fmt.Errorf("%d of %s not %s; the gravest: %w",
		failed, plural(len(ids), "dead letter"), done, gravest)}
}

// exitGravity orders the exit codes of a failed action on one dead letter:
// a database error over an unknown id over a refusal.
func exitGravity(code int) int {
	switch code {
	case ExitRefused:
		return 1
	case ExitNotFound:
		return 2
	}
	return 3
}

// notef writes a note to stderr.
func (a *app) notef(format string, args ...any) {
	fmt.Fprintf(a.stderr, "vantage: "+format+"\n", args...)
}
