package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/vantage-go/vantage/ports"
)

// RebuildsLimitDefault is how many rebuild requests rebuild list shows
// unless --limit says otherwise.
const RebuildsLimitDefault = 20

// rebuildsListFlags are the flags of rebuild list.
type rebuildsListFlags struct {
	perspective string
	status      string
	limit       int
}

func (a *app) rebuildListCommand() *cobra.Command {
	var f rebuildsListFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List rebuild requests, newest first, with their progress",
		Long: `List rebuild requests, newest first by the time they were requested: their
perspective, the streams they cover (every stream, or how many were
named), where they stand, their progress (streams done of the total,
events replayed), an estimate of the time a pending or running one has
left, who asked, and why a failed one failed.

At most --limit are shown (0: all); when more match, a note on stderr says
so. The error column is cut to one short line; --json has the full text.

JSON: {"truncated", "rebuilds": [{the fields of 'vantage rebuild --json'}]};
truncated is true when more requests match than --limit.`,
		Example: `  vantage rebuild list
  vantage rebuild list --perspective order_summary --status running
  vantage rebuild list --status failed --json | jq -r '.rebuilds[] | .id + " " + .error'`,
		Args: cobra.NoArgs,
	}
	cmd.RunE = a.action(func(ctx context.Context, _ []string) error { return a.rebuildsList(ctx, f) })
	fl := cmd.Flags()
	fl.StringVar(&f.perspective, "perspective", "", "only the requests of this perspective")
	fl.StringVar(&f.status, "status", "all", "pending, running, done, failed, cancelled, or all")
	fl.IntVar(&f.limit, "limit", RebuildsLimitDefault, "show at most this many (0: all)")
	return cmd
}

type rebuildsReport struct {
	Truncated bool          `json:"truncated"`
	Rebuilds  []rebuildView `json:"rebuilds"`
}

func (r *rebuildsReport) writeText(w io.Writer) {
	if len(r.Rebuilds) == 0 {
		fmt.Fprintln(w, "no rebuild requests")
		return
	}
	writeRebuildsTable(w, "ID", r.Rebuilds)
}

// writeRebuildsTable writes rebuild requests as a table, its first column
// headed first.
func writeRebuildsTable(w io.Writer, first string, rebuilds []rebuildView) {
	rows := make([][]string, len(rebuilds))
	for i, v := range rebuilds {
		r := v.req
		scope := "all"
		if len(r.StreamIDs) > 0 {
			scope = strconv.Itoa(len(r.StreamIDs))
		}
		progress := "-"
		if r.StreamsTotal > 0 || r.StreamsDone > 0 {
			progress = fmt.Sprintf("%d/%d", r.StreamsDone, r.StreamsTotal)
		}
		rows[i] = []string{r.ID.String(), timeText(r.RequestedAt), cell(r.Perspective), scope, string(r.Status), progress,
			strconv.FormatInt(r.EventsReplayed, 10), etaText(r), cell(r.RequestedBy), cell(r.Error)}
	}
	writeTable(w, []string{first, "REQUESTED", "PERSPECTIVE", "STREAMS", "STATUS", "DONE", "EVENTS", "ETA", "BY", "ERROR"}, rows)
}

func (a *app) rebuildsList(ctx context.Context, f rebuildsListFlags) error {
	params := &ports.RebuildsListParams{Perspective: f.perspective}
	switch st := ports.RebuildStatus(f.status); st {
	case "all":
	case ports.RebuildPending, ports.RebuildRunning, ports.RebuildDone, ports.RebuildFailed, ports.RebuildCancelled:
		params.Status = st
	default:
		return usageErrorf("--status %q must be pending, running, done, failed, cancelled or all", f.status)
	}
	if f.limit < 0 {
		return usageErrorf("--limit must not be negative, got %d", f.limit)
	}
	if f.limit > 0 {
		params.Limit = f.limit + 1 // one more tells whether more match
	}
	s, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	cctx, cancel := a.call(ctx)
	defer cancel()
	list, err := s.admin.RebuildsList(cctx, params)
	if err != nil {
		return err
	}
	r := &rebuildsReport{Rebuilds: []rebuildView{}}
	for _, req := range list {
		if f.limit > 0 && len(r.Rebuilds) == f.limit {
			r.Truncated = true
			break
		}
		r.Rebuilds = append(r.Rebuilds, viewRebuild(req))
	}
	if err := a.print(r); err != nil {
		return err
	}
	if r.Truncated {
		a.notef("more rebuild requests match: showing the newest %d; raise --limit, or 0 for all", f.limit)
	}
	return nil
}

func (a *app) rebuildCancelCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a pending or running rebuild request",
		Long: `Cancel a rebuild request that is pending or running: it ends, cancelled,
and the instance carrying it out stops at its next progress report (within
about a second), fenced out by the cancellation. The streams it rebuilt
stay rebuilt; the others keep their models as they were. Cancelling a
cancelled request changes nothing.

A request that is done or failed cannot be cancelled (exit 3); an id no
request has fails with exit 4.

JSON: {"already_cancelled", "rebuild": {the fields of 'vantage rebuild
--json'}}: the request as it stands after the cancellation.`,
		Example: `  vantage rebuild cancel 0197a3c4-5b6e-7f80-9a1b-2c3d4e5f6a7b`,
		Args:    exactArgs("ID"),
		RunE:    a.action(func(ctx context.Context, args []string) error { return a.rebuildCancel(ctx, args[0]) }),
	}
}

type rebuildCancelReport struct {
	AlreadyCancelled bool        `json:"already_cancelled"`
	Rebuild          rebuildView `json:"rebuild"`
}

func (r *rebuildCancelReport) writeText(w io.Writer) {
	req := r.Rebuild.req
	if r.AlreadyCancelled {
		fmt.Fprintf(w, "rebuild %s of perspective %q was already cancelled: nothing to do\n", req.ID, req.Perspective)
		return
	}
	if req.StartedAt.IsZero() {
		fmt.Fprintf(w, "cancelled rebuild %s of perspective %q before an instance claimed it\n", req.ID, req.Perspective)
		return
	}
	fmt.Fprintf(w, "cancelled rebuild %s of perspective %q after %s; the streams rebuilt stay rebuilt\n",
		req.ID, req.Perspective, streamsText(req))
}

func (a *app) rebuildCancel(ctx context.Context, arg string) error {
	id, err := uuid.Parse(arg)
	if err != nil {
		return usageErrorf("not a rebuild request id (a UUID): %q", arg)
	}
	s, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	req, err := a.rebuildGet(ctx, s, id)
	if err != nil {
		return err
	}
	switch req.Status {
	case ports.RebuildCancelled:
		return a.print(&rebuildCancelReport{AlreadyCancelled: true, Rebuild: viewRebuild(req)})
	case ports.RebuildDone, ports.RebuildFailed:
		return refusedErrorf("rebuild %s of perspective %q is %s: only a pending or running one can be cancelled", id, req.Perspective, req.Status)
	}
	cctx, cancel := a.call(ctx)
	err = s.admin.RebuildCancel(cctx, &ports.RebuildCancelParams{ID: id})
	cancel()
	if err != nil {
		return err // ErrVersionConflict, exit 3, if it ended meanwhile
	}
	if req, err = a.rebuildGet(ctx, s, id); err != nil {
		return err
	}
	return a.print(&rebuildCancelReport{Rebuild: viewRebuild(req)})
}

// rebuildGet reads the rebuild request id; an unknown id fails with
// ExitNotFound.
func (a *app) rebuildGet(ctx context.Context, s *session, id uuid.UUID) (ports.RebuildRequest, error) {
	cctx, cancel := a.call(ctx)
	defer cancel()
	req, err := s.admin.RebuildGet(cctx, &ports.RebuildGetParams{ID: id})
	if errors.Is(err, ports.ErrNotFound) {
		return req, notFoundErrorf("no rebuild request has id %s in schema %q", id, a.schema)
	}
	return req, err
}
