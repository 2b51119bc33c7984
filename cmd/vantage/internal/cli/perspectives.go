package cli

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/vantage-go/vantage/ports"
)

func (a *app) retireCommand() *cobra.Command {
	var dropModels, yes bool
	cmd := &cobra.Command{
		Use:   "retire PERSPECTIVE",
		Short: "Retire a perspective: stop and delete its work",
		Long: `Retire a perspective removed from the code for good: its subscriptions are
deleted and later registrations of it ignored, so appends stop creating its
work, even from instances that still run it; its pending work is deleted.
With --drop-models its cursors, models and snapshots are deleted too. Its
dead letters stay. Safe while instances run; 'vantage revive' undoes the
retirement (not the deletions).

It asks for a confirmation on a terminal; without a terminal it refuses
(exit 3) unless --yes is given. A perspective the schema does not know (no
subscription, work, cursor, model, dead letter or retirement names it) is
not retired: exit 4, as the name is most likely mistyped. Retiring a
retired perspective again deletes what was stored for it since.

JSON: {"perspective", "already_retired", "dropped_models", "subscriptions",
"work", "cursors", "models", "snapshots"}: the counts of what was deleted.`,
		Example: `  vantage retire order_summary_v1
  vantage retire order_summary_v1 --drop-models --yes`,
		Args: exactArgs("PERSPECTIVE"),
	}
	cmd.RunE = a.action(func(ctx context.Context, args []string) error { return a.retire(ctx, args[0], dropModels, yes) })
	cmd.Flags().BoolVar(&dropModels, "drop-models", false, "also delete its cursors, models and snapshots")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for a confirmation")
	return cmd
}

func (a *app) reviveCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "revive PERSPECTIVE",
		Short: "Undo the retirement of a perspective",
		Long: `Undo the retirement of a perspective: registrations of it count again, so
the next instance start, or append through a registry that has it,
subscribes it again. What the retirement deleted stays deleted. Reviving a
perspective that is not retired changes nothing; one the schema does not
know at all fails with exit 4.

JSON: {"perspective", "revived"}: revived is false when it was not retired.`,
		Example: `  vantage revive order_summary_v1`,
		Args:    exactArgs("PERSPECTIVE"),
		RunE:    a.action(func(ctx context.Context, args []string) error { return a.revive(ctx, args[0]) }),
	}
}

// exactArgs accepts one non-empty argument, named what in messages.
func exactArgs(what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) != 1:
			return fmt.Errorf("%s takes one %s, got %d arguments", cmd.CommandPath(), what, len(args))
		case args[0] == "":
			return fmt.Errorf("%s must not be empty", what)
		}
		return nil
	}
}

type retireReport struct {
	Perspective    string `json:"perspective"`
	AlreadyRetired bool   `json:"already_retired"`
	DroppedModels  bool   `json:"dropped_models"`
	Subscriptions  int    `json:"subscriptions"`
	Work           int    `json:"work"`
	Cursors        int    `json:"cursors"`
	Models         int    `json:"models"`
	Snapshots      int    `json:"snapshots"`

	schema string
}

func (r *retireReport) writeText(w io.Writer) {
	verb := "retired"
	if r.AlreadyRetired {
		verb = "retired again"
	}
	fmt.Fprintf(w, "%s perspective %q in schema %q\n", verb, r.Perspective, r.schema)
	fmt.Fprintf(w, "deleted %s and %s\n", plural(r.Subscriptions, "subscription"), plural(r.Work, "pending work row"))
	if r.DroppedModels {
		fmt.Fprintf(w, "deleted %s, %s and %s\n", plural(r.Cursors, "cursor"), plural(r.Models, "model"), plural(r.Snapshots, "snapshot"))
	} else {
		fmt.Fprintln(w, "kept its cursors, models and snapshots (--drop-models deletes them)")
	}
}

func (a *app) retire(ctx context.Context, name string, dropModels, yes bool) error {
	s, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	retired, err := a.isRetired(ctx, s, name)
	if err != nil {
		return err
	}
	if !retired {
		if err := a.mustKnow(ctx, s, name); err != nil {
			return err
		}
	}
	question := fmt.Sprintf("Retire perspective %q in schema %q? Appends stop creating its work and its pending work is deleted", name, a.schema)
	if dropModels {
		question += ", with its cursors, models and snapshots"
	}
	if err := a.confirm(yes, "retire", question+"."); err != nil {
		return err
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	res, err := s.admin.PerspectiveRetire(cctx, &ports.PerspectiveRetireParams{Perspective: name, DropState: dropModels})
	if err != nil {
		return err
	}
	return a.print(&retireReport{
		Perspective:    name,
		AlreadyRetired: retired,
		DroppedModels:  dropModels,
		Subscriptions:  res.Subscriptions,
		Work:           res.Work,
		Cursors:        res.Cursors,
		Models:         res.Models,
		Snapshots:      res.Snapshots,
		schema:         a.schema,
	})
}

type reviveReport struct {
	Perspective string `json:"perspective"`
	Revived     bool   `json:"revived"`
}

func (r *reviveReport) writeText(w io.Writer) {
	if !r.Revived {
		fmt.Fprintf(w, "perspective %q is not retired: nothing to revive\n", r.Perspective)
		return
	}
	fmt.Fprintf(w, "revived perspective %q: its next registration subscribes it again\n", r.Perspective)
}

func (a *app) revive(ctx context.Context, name string) error {
	s, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	retired, err := a.isRetired(ctx, s, name)
	if err != nil {
		return err
	}
	if !retired {
		if err := a.mustKnow(ctx, s, name); err != nil {
			return err
		}
		return a.print(&reviveReport{Perspective: name})
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	if err := s.admin.PerspectiveRevive(cctx, &ports.PerspectiveReviveParams{Perspective: name}); err != nil {
		return err
	}
	return a.print(&reviveReport{Perspective: name, Revived: true})
}

func (a *app) isRetired(ctx context.Context, s *session, name string) (bool, error) {
	cctx, cancel := a.call(ctx)
	defer cancel()
	retired, err := s.admin.PerspectivesRetired(cctx)
	if err != nil {
		return false, err
	}
	return slices.Contains(retired, name), nil
}

// mustKnow fails with ExitNotFound when nothing in the schema names the
// perspective.
func (a *app) mustKnow(ctx context.Context, s *session, name string) error {
	cctx, cancel := a.call(ctx)
	defer cancel()
	var known bool
	if err := s.pool.QueryRow(cctx, fmt.Sprintf(sqlPerspectiveKnown, pgx.Identifier{a.schema}.Sanitize()), name).Scan(&known); err != nil {
		return fmt.Errorf("looking up perspective %q: %w", name, err)
	}
	if !known {
		return notFoundErrorf("perspective %q is unknown in schema %q: no subscription, work, cursor, model or dead letter names it (check the name and --schema)", name, a.schema)
	}
	return nil
}

// sqlPerspectiveKnown tells whether any table of the schema (%[1]s) names
// perspective $1: the one question the commands ask of the tables rather
// than of the ports. The subscriptions are few and the dead letters are
// indexed by perspective; work rows, cursors and models are scanned until
// one matches, which a retire or revive, rare and by hand, can afford (the
// engine's hot paths carry no index by perspective).
const sqlPerspectiveKnown = `SELECT EXISTS (SELECT 1 FROM %[1]s.vantage_subscriptions WHERE perspective = $1)
    OR EXISTS (SELECT 1 FROM %[1]s.vantage_dead_letters WHERE perspective = $1)
    OR EXISTS (SELECT 1 FROM %[1]s.vantage_work WHERE perspective = $1)
    OR EXISTS (SELECT 1 FROM %[1]s.vantage_cursors WHERE perspective = $1)
    OR EXISTS (SELECT 1 FROM %[1]s.vantage_models WHERE perspective = $1)`
