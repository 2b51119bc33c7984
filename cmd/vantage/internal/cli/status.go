package cli

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/ports"
)

// StatusFinishedRebuilds is how many finished rebuild requests (done,
// failed or cancelled) status shows, the newest, after the pending and
// running ones.
const StatusFinishedRebuilds = 5

// clearScreen moves the cursor home and clears a terminal (ANSI).
const clearScreen = "\x1b[H\x1b[2J"

// statusFlags are the flags of status.
type statusFlags struct {
	watch      bool
	interval   time.Duration
	liveWithin time.Duration
}

func (a *app) statusCommand() *cobra.Command {
	var f statusFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show perspectives, instances and rebuilds at a glance",
		Long: `Show where the schema stands, in three tables.

Perspectives (Admin.PerspectivesStatus), one row each: the streams it has
a cursor for, how many of those are caught up (no pending work), how many
streams it is behind on, the cursors that record a failure, the events
waiting for a retry, the streams waiting for a rewind, the pending events
and the age of the oldest (its lag), its waiting dead letters, and whether
it is retired.

Instances (Admin.InstancesList): service, host, how long ago each last
heartbeat was, whether that makes it live (--live-within), whether it is
passive, and how many streams it holds (their lease names it).

Rebuild requests: the pending and running ones, then the newest finished
ones (at most 5), each with its progress and the time it has left, as
'vantage rebuild list' shows them.

With --watch the status is drawn again every --interval until the command
is interrupted (Ctrl-C, exit 0): on a terminal the screen is cleared
before each frame, otherwise the frames follow one another, a blank line
apart (one JSON document each with --json). A frame that fails (the
database went away) is reported on stderr and the next one is tried.
Each frame reads the tables afresh: perspectives cost a pass over the
cursors and the pending work, so keep --interval in seconds, not
milliseconds, on a large schema.

Ages are measured on the database's clock, which records heartbeats and
work.

JSON: {"schema", "now", "live_within_seconds", "perspectives":
[{"perspective", "retired", "event_types", "streams", "caught_up",
"pending_streams", "failed", "awaiting_retry", "rewind_required",
"pending", "oldest_pending_age_seconds", "dead_letters"}], "instances":
[{the fields of 'vantage instances --json'}], "rebuilds": [{the fields of
'vantage rebuild --json'}]}.`,
		Example: `  vantage status
  vantage status --watch --interval 5s
  vantage status --json | jq '.perspectives[] | select(.oldest_pending_age_seconds > 60) | .perspective'`,
		Args: cobra.NoArgs,
	}
	cmd.RunE = a.action(func(ctx context.Context, _ []string) error {
		switch {
		case f.interval <= 0:
			return usageErrorf("--interval must be positive, got %s", f.interval)
		case cmd.Flags().Changed("interval") && !f.watch:
			return usageErrorf("--interval applies with --watch only")
		case f.liveWithin <= 0:
			return usageErrorf("--live-within must be positive, got %s", f.liveWithin)
		}
		return a.status(ctx, f)
	})
	fl := cmd.Flags()
	fl.BoolVarP(&f.watch, "watch", "w", false, "draw the status again every --interval until interrupted")
	fl.DurationVar(&f.interval, "interval", IntervalDefault, "with --watch: how often to draw it")
	fl.DurationVar(&f.liveWithin, "live-within", postgres.LiveWithinDefault, "an instance whose heartbeat is newer is live")
	return cmd
}

// perspectiveView is a perspective as status reports it.
type perspectiveView struct {
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

	oldest time.Duration
}

func viewPerspective(ps ports.PerspectiveStatus) perspectiveView {
	types := ps.EventTypes
	if types == nil {
		types = []string{}
	}
	return perspectiveView{
		Perspective:             ps.Perspective,
		Retired:                 ps.Retired,
		EventTypes:              types,
		Streams:                 ps.Streams,
		CaughtUp:                ps.CaughtUp,
		PendingStreams:          ps.PendingStreams,
		Failed:                  ps.Failed,
		AwaitingRetry:           ps.AwaitingRetry,
		RewindRequired:          ps.RewindRequired,
		Pending:                 ps.Pending,
		OldestPendingAgeSeconds: ps.OldestAge.Seconds(),
		DeadLetters:             ps.DeadLetters,
		oldest:                  ps.OldestAge,
	}
}

type statusReport struct {
	Schema            string            `json:"schema"`
	Now               *time.Time        `json:"now"`
	LiveWithinSeconds float64           `json:"live_within_seconds"`
	Perspectives      []perspectiveView `json:"perspectives"`
	Instances         []instanceView    `json:"instances"`
	Rebuilds          []rebuildView     `json:"rebuilds"`

	liveWithin time.Duration
}

func (r *statusReport) writeText(w io.Writer) {
	fmt.Fprintf(w, "schema %q at %s: %s\n\n", r.Schema, timeText(*r.Now), r.summary())

	if len(r.Perspectives) == 0 {
		fmt.Fprintln(w, "no perspectives")
	} else {
		rows := make([][]string, len(r.Perspectives))
		for i, p := range r.Perspectives {
			lag := "-"
			if p.Pending > 0 {
				lag = ageText(p.oldest)
			}
			rows[i] = []string{cell(p.Perspective), count(p.Streams), count(p.CaughtUp), count(p.PendingStreams), count(p.Failed),
				count(p.AwaitingRetry), count(p.RewindRequired), count(p.Pending), lag, count(p.DeadLetters), yesNo(p.Retired)}
		}
		writeTable(w, []string{"PERSPECTIVE", "STREAMS", "CAUGHT-UP", "BEHIND", "FAILED", "RETRYING", "REWINDS", "PENDING", "LAG", "DEAD", "RETIRED"}, rows)
	}
	fmt.Fprintln(w)

	if len(r.Instances) == 0 {
		fmt.Fprintln(w, "no instances")
	} else {
		rows := make([][]string, len(r.Instances))
		for i, in := range r.Instances {
			rows[i] = []string{in.ID.String(), cell(in.Service), cell(in.Host), ageText(in.age) + " ago", yesNo(in.Live),
				yesNo(in.Passive), strconv.Itoa(in.LeasedStreams)}
		}
		writeTable(w, []string{"INSTANCE", "SERVICE", "HOST", "HEARTBEAT", "LIVE", "PASSIVE", "LEASED"}, rows)
	}
	fmt.Fprintln(w)

	if len(r.Rebuilds) == 0 {
		fmt.Fprintln(w, "no rebuild requests")
	} else {
		writeRebuildsTable(w, "REBUILD", r.Rebuilds)
	}
}

// summary sums the status up in one line.
func (r *statusReport) summary() string {
	var pending, dead int64
	behind := 0
	for _, p := range r.Perspectives {
		pending += p.Pending
		dead += p.DeadLetters
		if p.Pending > 0 {
			behind++
		}
	}
	live, open := 0, 0
	for _, in := range r.Instances {
		if in.Live {
			live++
		}
	}
	for _, rb := range r.Rebuilds {
		if rb.Status == string(ports.RebuildPending) || rb.Status == string(ports.RebuildRunning) {
			open++
		}
	}
	parts := []string{
		fmt.Sprintf("%s (%d behind)", plural(len(r.Perspectives), "perspective"), behind),
		plural(int(pending), "pending event"),
		plural(int(dead), "dead letter") + " waiting",
		fmt.Sprintf("%s (%d live within %s)", plural(len(r.Instances), "instance"), live, r.liveWithin),
		plural(open, "rebuild") + " open",
	}
	return strings.Join(parts, ", ")
}

func count(n int64) string { return strconv.FormatInt(n, 10) }

// status prints the status once, or with --watch every --interval until
// ctx ends.
func (a *app) status(ctx context.Context, f statusFlags) error {
	s, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	if !f.watch {
		r, err := a.statusReport(ctx, s, f.liveWithin)
		if err != nil {
			return err
		}
		return a.print(r)
	}
	ticks, stop := a.ticker(f.interval)
	defer stop()
	clear := a.env.OutputTerminal && !a.json
	for frame := 0; ; frame++ {
		var b bytes.Buffer
		switch r, err := a.statusReport(ctx, s, f.liveWithin); {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			a.warnf("reading the status failed, trying again in %s: %v", f.interval, err)
		default:
			if clear {
				b.WriteString(clearScreen)
			} else if frame > 0 && !a.json {
				b.WriteString("\n")
			}
			if err := a.render(&b, r); err != nil {
				return err
			}
			if _, err := a.stdout.Write(b.Bytes()); err != nil {
				return fmt.Errorf("writing the status: %w", err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticks:
		}
	}
}

// statusReport reads the status of the schema.
func (a *app) statusReport(ctx context.Context, s *session, liveWithin time.Duration) (*statusReport, error) {
	now, err := a.now(ctx, s)
	if err != nil {
		return nil, err
	}
	var (
		perspectives []ports.PerspectiveStatus
		instances    []ports.Instance
		rebuilds     []ports.RebuildRequest
	)
	for _, read := range []func(ctx context.Context) error{
		func(ctx context.Context) (err error) {
			perspectives, err = s.admin.PerspectivesStatus(ctx, &ports.PerspectivesStatusParams{Now: now})
			return err
		},
		func(ctx context.Context) (err error) {
			instances, err = s.admin.InstancesList(ctx)
			return err
		},
		func(ctx context.Context) (err error) {
			rebuilds, err = a.statusRebuilds(ctx, s)
			return err
		},
	} {
		cctx, cancel := a.call(ctx)
		err := read(cctx)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	r := &statusReport{
		Schema:            a.schema,
		Now:               jsonTime(now),
		LiveWithinSeconds: liveWithin.Seconds(),
		Perspectives:      make([]perspectiveView, len(perspectives)),
		Instances:         make([]instanceView, len(instances)),
		Rebuilds:          make([]rebuildView, len(rebuilds)),
		liveWithin:        liveWithin,
	}
	for i, ps := range perspectives {
		r.Perspectives[i] = viewPerspective(ps)
	}
	for i, in := range instances {
		r.Instances[i] = viewInstance(in, now, liveWithin)
	}
	for i, rb := range rebuilds {
		r.Rebuilds[i] = viewRebuild(rb)
	}
	return r, nil
}

// statusRebuilds returns the pending and running rebuild requests and the
// newest StatusFinishedRebuilds finished ones, newest first. Its three
// small reads share one --timeout.
func (a *app) statusRebuilds(ctx context.Context, s *session) ([]ports.RebuildRequest, error) {
	var open []ports.RebuildRequest
	for _, st := range []ports.RebuildStatus{ports.RebuildPending, ports.RebuildRunning} {
		list, err := s.admin.RebuildsList(ctx, &ports.RebuildsListParams{Status: st})
		if err != nil {
			return nil, err
		}
		open = append(open, list...)
	}
	// Among the newest len(open)+StatusFinishedRebuilds requests at most
	// len(open) are open: the rest are the newest finished ones.
	newest, err := s.admin.RebuildsList(ctx, &ports.RebuildsListParams{Limit: len(open) + StatusFinishedRebuilds})
	if err != nil {
		return nil, err
	}
	finished := 0
	for _, r := range newest {
		if r.Status != ports.RebuildPending && r.Status != ports.RebuildRunning && finished < StatusFinishedRebuilds {
			open = append(open, r)
			finished++
		}
	}
	slices.SortFunc(open, func(x, y ports.RebuildRequest) int {
		return cmp.Or(y.RequestedAt.Compare(x.RequestedAt), bytes.Compare(y.ID[:], x.ID[:]))
	})
	return open, nil
}
