package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/vantage-go/vantage/ports"
)

// requeueFlags are the flags of dead-letters requeue.
type requeueFlags struct {
	generation  string
	perspective string
	all         bool
	since       string
	yes         bool
}

func (a *app) deadLettersRequeueCommand() *cobra.Command {
	var f requeueFlags
	cmd := &cobra.Command{
		Use:   "requeue (ID... | --perspective P | --all)",
		Short: "Requeue dead letters: apply their events again",
		Long: `Requeue dead letters: their work is stored again, pending, with no
attempts, and applied in order (by a rewind when its perspective went on
past the event). Their status becomes requeued, then recovered once
applied; one that fails again is dead again.

By id: each dead letter named is requeued, one at a time, and its outcome
printed. A dead or ignored dead letter can be requeued; a requeued or
recovered one is refused. An id that fails does not undo the ones before
it. The exit code is 0 when every id was requeued, else that of the
gravest failure: 1 (a database error) over 4 (an unknown id) over 3
(refused). Ids that are not UUIDs fail the command as usage before
anything is changed.

In bulk: --perspective P requeues every waiting (dead) dead letter of P,
in one atomic step. --all does the same for every perspective that has
waiting dead letters and is not retired, one step per perspective: a
failure leaves the perspectives before it requeued. Ignored dead letters
are requeued by id only: someone gave up on them on purpose. --since keeps
those dead-lettered at or after a time, a date or a duration ago, as in
'dead-letters list'. A bulk requeue asks for a confirmation on a terminal,
saying how many it will requeue; without a terminal it refuses (exit 3)
unless --yes is given. A perspective the schema does not know fails with
exit 4; a retired one is refused (exit 3): revive it first.

Ids do not mix with --perspective, --all or --since, nor --perspective
with --all: each is a usage error.

JSON, by id: {"results": [{"id", "outcome", "error"}]}, outcome one of
requeued, not_found, refused, failed. In bulk: {"requeued", "since",
"generation", "perspectives": [{"perspective", "requeued"}]}: how many
were requeued, in all and per perspective; since is null without --since.`,
		Example: `  vantage dead-letters requeue 0197a3c4-5b6e-7f80-9a1b-2c3d4e5f6a7b
  vantage dead-letters requeue --perspective order_summary --since 2h --generation v43
  vantage dead-letters requeue --all --yes
  vantage dead-letters list --perspective order_summary --json \
    | jq -r '.dead_letters[].id' | xargs -r vantage dead-letters requeue --generation v42`,
	}
	cmd.RunE = a.action(func(ctx context.Context, args []string) error {
		switch {
		case len(args) > 0 && (f.perspective != "" || f.all || f.since != ""):
			return usageErrorf("dead letter ids do not mix with --perspective, --all or --since: requeue either the ids or a selection")
		case len(args) > 0:
			return a.eachDeadLetter(ctx, args, "requeued", func(ctx context.Context, admin ports.Admin, id uuid.UUID) error {
				return admin.DeadLetterRequeue(ctx, &ports.DeadLetterRequeueParams{ID: id, Generation: f.generation})
			})
		case f.perspective != "" && f.all:
			return usageErrorf("--perspective and --all exclude each other: --all requeues the dead letters of every perspective")
		case f.perspective == "" && !f.all:
			return usageErrorf("requeue takes dead letter ids, or --perspective P, or --all")
		}
		var since sinceFlag
		if f.since != "" {
			var err error
			if since, err = parseSince(f.since); err != nil {
				return err
			}
		}
		return a.requeueBulk(ctx, f, since)
	})
	fl := cmd.Flags()
	fl.StringVar(&f.generation, "generation", "", "deploy generation recorded with the requeue (the code that will apply it)")
	fl.StringVar(&f.perspective, "perspective", "", "requeue every waiting dead letter of this perspective")
	fl.BoolVar(&f.all, "all", false, "requeue every waiting dead letter of every perspective that is not retired")
	fl.StringVar(&f.since, "since", "", "with --perspective or --all: only those dead-lettered at or after a time, a date, or a duration ago")
	fl.BoolVarP(&f.yes, "yes", "y", false, "do not ask for a confirmation (bulk requeues)")
	return cmd
}

// requeuedView is what a bulk requeue did to one perspective.
type requeuedView struct {
	Perspective string `json:"perspective"`
	Requeued    int    `json:"requeued"`
}

type requeueBulkReport struct {
	Requeued     int            `json:"requeued"`
	Since        *time.Time     `json:"since"`
	Generation   string         `json:"generation"`
	Perspectives []requeuedView `json:"perspectives"`

	all bool
}

func (r *requeueBulkReport) writeText(w io.Writer) {
	if !r.all {
		p := r.Perspectives[0]
		if p.Requeued == 0 {
			fmt.Fprintf(w, "no waiting dead letters of perspective %q to requeue\n", p.Perspective)
			return
		}
		fmt.Fprintf(w, "requeued %s of perspective %q\n", plural(p.Requeued, "dead letter"), p.Perspective)
		return
	}
	if r.Requeued == 0 {
		fmt.Fprintln(w, "no waiting dead letters to requeue")
		return
	}
	for _, p := range r.Perspectives {
		if p.Requeued > 0 {
			fmt.Fprintf(w, "requeued %s of perspective %q\n", plural(p.Requeued, "dead letter"), p.Perspective)
		}
	}
	fmt.Fprintf(w, "requeued %s of %s\n", plural(r.Requeued, "dead letter"), plural(len(r.Perspectives), "perspective"))
}

// requeueBulk requeues the waiting dead letters of f.perspective, or of
// every perspective not retired with --all, one DeadLettersRequeue each.
func (a *app) requeueBulk(ctx context.Context, f requeueFlags, since sinceFlag) error {
	s, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	cctx, cancel := a.call(ctx)
	retired, err := s.admin.PerspectivesRetired(cctx)
	cancel()
	if err != nil {
		return err
	}
	if f.perspective != "" {
		if slices.Contains(retired, f.perspective) {
			return refusedErrorf("perspective %q is retired: revive it before requeueing its dead letters ('vantage revive %s')", f.perspective, f.perspective)
		}
		if err := a.mustKnow(ctx, s, f.perspective); err != nil {
			return err
		}
	}
	if since.ago > 0 {
		now, err := a.now(ctx, s)
		if err != nil {
			return err
		}
		since.at = now.Add(-since.ago)
	}

	r := &requeueBulkReport{Since: jsonTime(since.at), Generation: f.generation, Perspectives: []requeuedView{}, all: f.all}
	names := []string{f.perspective}
	if f.all || !f.yes {
		waiting, err := a.waitingDeadLetters(ctx, s, f.perspective, since.at)
		if err != nil {
			return err
		}
		if f.all {
			names = names[:0]
			for _, name := range slices.Sorted(maps.Keys(waiting)) {
				if slices.Contains(retired, name) {
					a.notef("skipped %s of retired perspective %q", plural(waiting[name], "waiting dead letter"), name)
					continue
				}
				names = append(names, name)
			}
		}
		count := 0
		for _, name := range names {
			count += waiting[name]
		}
		if count == 0 {
			for _, name := range names {
				r.Perspectives = append(r.Perspectives, requeuedView{Perspective: name})
			}
			return a.print(r)
		}
		if err := a.confirm(f.yes, "a bulk requeue", requeueQuestion(names, count, since.at, a.schema, f.all)); err != nil {
			return err
		}
	}

	for _, name := range names {
		cctx, cancel := a.call(ctx)
		n, err := s.admin.DeadLettersRequeue(cctx, &ports.DeadLettersRequeueParams{
			Perspective: name, Since: since.at, Generation: f.generation,
		})
		cancel()
		if err != nil {
			if len(r.Perspectives) > 0 {
				_ = a.print(r) // what was requeued before; the error is the news
				return fmt.Errorf("requeueing the dead letters of perspective %q (those printed were requeued): %w", name, err)
			}
			return fmt.Errorf("requeueing the dead letters of perspective %q: %w", name, err)
		}
		r.Requeued += n
		r.Perspectives = append(r.Perspectives, requeuedView{Perspective: name, Requeued: n})
	}
	return a.print(r)
}

// waitingDeadLetters counts the waiting (dead) dead letters of
// perspective, or of every perspective when it is empty, dead-lettered at
// or after since, by perspective.
func (a *app) waitingDeadLetters(ctx context.Context, s *session, perspective string, since time.Time) (map[string]int, error) {
	cctx, cancel := a.call(ctx)
	defer cancel()
	dls, err := s.deadLetters.DeadLettersList(cctx, &ports.DeadLettersListParams{
		Perspective: perspective, Status: ports.DeadLetterDead, Since: since,
	})
	if err != nil {
		return nil, err
	}
	waiting := map[string]int{}
	for _, dl := range dls {
		waiting[dl.Perspective]++
	}
	return waiting, nil
}

// requeueQuestion asks to confirm a bulk requeue of count dead letters of
// names.
func requeueQuestion(names []string, count int, since time.Time, schema string, all bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Requeue %s", plural(count, "waiting dead letter"))
	if all {
		fmt.Fprintf(&b, " of %s (%s)", plural(len(names), "perspective"), strings.Join(names, ", "))
	} else {
		fmt.Fprintf(&b, " of perspective %q", names[0])
	}
	if !since.IsZero() {
		fmt.Fprintf(&b, " dead-lettered since %s", timeText(since))
	}
	fmt.Fprintf(&b, " in schema %q? Their events are applied again.", schema)
	return b.String()
}
