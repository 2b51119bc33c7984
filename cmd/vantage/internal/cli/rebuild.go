package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/ports"
)

// IntervalDefault is how often rebuild --wait reads its request, unless
// --interval says otherwise.
const IntervalDefault = 2 * time.Second

// rebuildFlags are the flags of rebuild.
type rebuildFlags struct {
	streams     []string
	requestedBy string
	wait        bool
	interval    time.Duration
}

func (a *app) rebuildCommand() *cobra.Command {
	var f rebuildFlags
	cmd := &cobra.Command{
		Use:   "rebuild PERSPECTIVE",
		Short: "Request a rebuild of a perspective, carried out by the running instances",
		Long: `Request a rebuild of a perspective: its models are replayed from scratch,
for the streams --stream names or else every stream with events it
handles, while everything else flows. vantage runs no engine: it stores a
durable request (Admin.RebuildRequest), which one of the running engine
instances that run the perspective claims at its next look (every
Options.Rewind.RebuildPollInterval, 5s by default) and carries out,
recording its progress. Should that instance stop or die, another
resumes the request after the last stream recorded done. The request's id
is printed.

With --wait the command follows the request, reading it every --interval
and printing a line whenever it moved on (streams done of the total,
events replayed, an estimate of the time left), until it ends: exit 0
when it is done; 1 when it failed (an event the perspective could not
replay), with its error; 3 when it was cancelled meanwhile (by 'vantage
rebuild cancel'): it was stopped on purpose, not broken. Interrupting the
command (Ctrl-C) stops the waiting, not the rebuild.

A perspective the schema does not know fails with exit 4: a mistyped
name would wait forever for an instance that runs it. A retired one is
refused (exit 3): revive it first. When no instance is live, a warning
says that the request waits for one. 'rebuild list' and 'rebuild cancel'
are subcommands: a perspective named list or cancel is rebuilt with
'vantage rebuild -- list'.

JSON: the request, {"id", "perspective", "stream_ids", "requested_by",
"requested_at", "status", "instance_id", "attempt", "claim_expiry",
"started_at", "updated_at", "finished_at", "error", "streams_total",
"streams_done", "events_replayed", "remaining_seconds"}; with --wait as it
ended, the progress lines going to stderr. status is pending, running,
done, failed or cancelled; stream_ids is empty for every stream; times are
null until they happen; remaining_seconds is the estimate of the time
left, null when there is nothing to go by yet.`,
		Example: `  vantage rebuild order_summary
  vantage rebuild order_summary --wait --requested-by "alice, INC-2291"
  vantage rebuild order_summary --stream 0197a3c4-1111-7000-8000-00000000abcd --wait --interval 10s
  vantage rebuild order_summary --json | jq -r .id`,
		Args: exactArgs("PERSPECTIVE"),
	}
	cmd.RunE = a.action(func(ctx context.Context, args []string) error {
		streams, err := f.check(cmd)
		if err != nil {
			return err
		}
		return a.rebuild(ctx, args[0], streams, f)
	})
	fl := cmd.Flags()
	fl.StringArrayVar(&f.streams, "stream", nil, "rebuild this stream (a UUID) only; repeat for more (default: every stream)")
	fl.StringVar(&f.requestedBy, "requested-by", "", "who asks, or why: stored with the request (a name, a ticket)")
	fl.BoolVar(&f.wait, "wait", false, "follow the request until it ends, printing its progress")
	fl.DurationVar(&f.interval, "interval", IntervalDefault, "with --wait: how often to read the request")
	cmd.AddCommand(a.rebuildListCommand(), a.rebuildCancelCommand())
	return cmd
}

// check rejects the flags of rebuild that cannot work, before anything
// is read, and returns the streams named.
func (f rebuildFlags) check(cmd *cobra.Command) ([]uuid.UUID, error) {
	if f.interval <= 0 {
		return nil, usageErrorf("--interval must be positive, got %s", f.interval)
	}
	if cmd.Flags().Changed("interval") && !f.wait {
		return nil, usageErrorf("--interval applies with --wait only")
	}
	var streams []uuid.UUID
	for _, s := range f.streams {
		id, err := uuid.Parse(s)
		switch {
		case err != nil:
			return nil, usageErrorf("--stream %q is not a UUID", s)
		case id == uuid.Nil:
			return nil, usageErrorf("--stream must not be the nil UUID")
		}
		streams = append(streams, id)
	}
	return streams, nil
}

// rebuildView is a rebuild request as the commands report it.
type rebuildView struct {
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

	req ports.RebuildRequest
}

func viewRebuild(r ports.RebuildRequest) rebuildView {
	v := rebuildView{
		ID:             r.ID,
		Perspective:    r.Perspective,
		StreamIDs:      r.StreamIDs,
		RequestedBy:    r.RequestedBy,
		RequestedAt:    jsonTime(r.RequestedAt),
		Status:         string(r.Status),
		Attempt:        r.Attempt,
		ClaimExpiry:    jsonTime(r.ClaimExpiry),
		StartedAt:      jsonTime(r.StartedAt),
		UpdatedAt:      jsonTime(r.UpdatedAt),
		FinishedAt:     jsonTime(r.FinishedAt),
		Error:          r.Error,
		StreamsTotal:   r.StreamsTotal,
		StreamsDone:    r.StreamsDone,
		EventsReplayed: r.EventsReplayed,
		req:            r,
	}
	if v.StreamIDs == nil {
		v.StreamIDs = []uuid.UUID{}
	}
	if r.InstanceID != uuid.Nil {
		id := r.InstanceID
		v.InstanceID = &id
	}
	if left, ok := r.Remaining(); ok {
		secs := left.Seconds()
		v.RemainingSeconds = &secs
	}
	return v
}

func (v *rebuildView) writeText(w io.Writer) {
	fmt.Fprintln(w, progressLine(v.req))
}

// scopeText says which streams a request rebuilds.
func scopeText(r ports.RebuildRequest) string {
	if len(r.StreamIDs) == 0 {
		return "every stream"
	}
	return plural(len(r.StreamIDs), "stream")
}

// streamsText says how far a request went: "2 of 5 streams".
func streamsText(r ports.RebuildRequest) string {
	if r.StreamsTotal == 0 && r.StreamsDone == 0 {
		return "no stream yet"
	}
	return fmt.Sprintf("%d of %s", r.StreamsDone, plural(int(r.StreamsTotal), "stream"))
}

// etaText is the estimate of the time a request has left, "-" when there
// is nothing to go by.
func etaText(r ports.RebuildRequest) string {
	if left, ok := r.Remaining(); ok {
		return ageText(left)
	}
	return "-"
}

// progressLine says where a request stands, in one line.
func progressLine(r ports.RebuildRequest) string {
	switch r.Status {
	case ports.RebuildPending:
		if r.Attempt == 0 {
			return fmt.Sprintf("pending: waiting for an instance that runs %q to claim it", r.Perspective)
		}
		return fmt.Sprintf("pending: released after %s, waiting for an instance to resume it", streamsText(r))
	case ports.RebuildRunning:
		if r.StreamsTotal == 0 {
			return fmt.Sprintf("running on instance %s (attempt %d): counting its streams", r.InstanceID, r.Attempt)
		}
		line := fmt.Sprintf("running on instance %s (attempt %d): %s, %s replayed", r.InstanceID, r.Attempt,
			streamsText(r), plural(int(r.EventsReplayed), "event"))
		if left, ok := r.Remaining(); ok {
			line += ", about " + ageText(left) + " left"
		}
		return line
	case ports.RebuildDone:
		return fmt.Sprintf("done: %s rebuilt, %s replayed, in %s", plural(int(r.StreamsDone), "stream"),
			plural(int(r.EventsReplayed), "event"), ageText(r.FinishedAt.Sub(r.StartedAt)))
	case ports.RebuildFailed:
		return fmt.Sprintf("failed after %s: %s", streamsText(r), r.Error)
	case ports.RebuildCancelled:
		if r.StartedAt.IsZero() {
			return "cancelled before an instance claimed it"
		}
		return fmt.Sprintf("cancelled after %s; the streams rebuilt stay rebuilt", streamsText(r))
	}
	return string(r.Status)
}

func (a *app) rebuild(ctx context.Context, perspective string, streams []uuid.UUID, f rebuildFlags) error {
	s, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	retired, err := a.isRetired(ctx, s, perspective)
	if err != nil {
		return err
	}
	if retired {
		return refusedErrorf("perspective %q is retired: revive it before rebuilding it ('vantage revive %s')", perspective, perspective)
	}
	if err := a.mustKnow(ctx, s, perspective); err != nil {
		return err
	}
	if err := a.warnNoLiveInstance(ctx, s, perspective); err != nil {
		return err
	}
	cctx, cancel := a.call(ctx)
	req, err := s.admin.RebuildRequest(cctx, &ports.RebuildRequestParams{Perspective: perspective, StreamIDs: streams, RequestedBy: f.requestedBy})
	cancel()
	if err != nil {
		return err
	}
	progress := a.stdout
	if a.json {
		progress = a.stderr
	}
	fmt.Fprintf(progress, "requested rebuild %s of perspective %q, %s\n", req.ID, perspective, scopeText(req))
	if !f.wait {
		if a.json {
			v := viewRebuild(req)
			return a.print(&v)
		}
		fmt.Fprintf(progress, "the instances that run %q carry it out: 'vantage rebuild list' shows its progress, 'vantage rebuild cancel %s' stops it\n",
			perspective, req.ID)
		return nil
	}
	req, err = a.rebuildWait(ctx, s, req, f.interval, progress)
	if err != nil {
		return err
	}
	if a.json {
		v := viewRebuild(req)
		if err := a.print(&v); err != nil {
			return err
		}
	}
	switch req.Status {
	case ports.RebuildFailed:
		return &exitError{code: ExitFailed, err: fmt.Errorf("rebuild %s of perspective %q failed: %s", req.ID, perspective, req.Error)}
	case ports.RebuildCancelled:
		return refusedErrorf("rebuild %s of perspective %q was cancelled", req.ID, perspective)
	}
	return nil
}

// rebuildWait reads req every interval until it ends, writing a progress
// line to w whenever it moved on, and returns it as it ended.
func (a *app) rebuildWait(ctx context.Context, s *session, req ports.RebuildRequest, interval time.Duration, w io.Writer) (ports.RebuildRequest, error) {
	ticks, stop := a.ticker(interval)
	defer stop()
	interrupted := func() error {
		return fmt.Errorf("stopped waiting for rebuild %s, which goes on ('vantage rebuild cancel %s' stops it): %w", req.ID, req.ID, ctx.Err())
	}
	last := ""
	for {
		if line := progressLine(req); line != last {
			fmt.Fprintln(w, line)
			last = line
		}
		switch req.Status {
		case ports.RebuildDone, ports.RebuildFailed, ports.RebuildCancelled:
			return req, nil
		}
		select {
		case <-ctx.Done():
			return req, interrupted()
		case <-ticks:
		}
		cctx, cancel := a.call(ctx)
		next, err := s.admin.RebuildGet(cctx, &ports.RebuildGetParams{ID: req.ID})
		cancel()
		switch {
		case ctx.Err() != nil:
			return req, interrupted()
		case err != nil:
			return req, fmt.Errorf("following rebuild %s, which goes on: %w", req.ID, err)
		}
		req = next
	}
}

// warnNoLiveInstance warns that a request for perspective waits when no
// engine instance is live.
func (a *app) warnNoLiveInstance(ctx context.Context, s *session, perspective string) error {
	cctx, cancel := a.call(ctx)
	list, err := s.admin.InstancesList(cctx)
	cancel()
	if err != nil {
		return err
	}
	now, err := a.now(ctx, s)
	if err != nil {
		return err
	}
	for _, in := range list {
		if now.Sub(in.LastHeartbeatAt) < postgres.LiveWithinDefault {
			return nil
		}
	}
	a.warnf("no engine instance is live (heartbeat within %s): the request waits for one that runs %q", postgres.LiveWithinDefault, perspective)
	return nil
}
