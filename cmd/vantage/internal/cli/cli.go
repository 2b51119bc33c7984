package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/ports"
)

// Exit codes of the vantage command. They are part of its interface:
// scripts branch on them.
const (
	// ExitOK: the command did what it was asked, or found nothing to do.
	ExitOK = 0
	// ExitFailed: the operation failed: the database could not be
	// reached, a statement failed, --timeout ran out.
	ExitFailed = 1
	// ExitUsage: the command line is wrong (an unknown command or flag, a
	// missing or malformed argument, no database named); nothing was read
	// or changed.
	ExitUsage = 2
	// ExitRefused: the command would not act: live engine instances
	// (migrate down without --force), a confirmation declined or
	// impossible (no terminal and no --yes), a dead letter whose status
	// does not allow the action, a retired perspective; or what it waited
	// for was stopped on purpose: a rebuild cancelled while rebuild --wait
	// followed it.
	ExitRefused = 3
	// ExitNotFound: what the command names does not exist: a dead letter
	// id, a rebuild request id, or a perspective the schema does not know.
	ExitNotFound = 4
)

// Defaults of the global flags.
const (
	// TimeoutDefault bounds each database call of a command.
	TimeoutDefault = time.Minute
	// ConnectTimeoutDefault bounds connecting to the database, unless the
	// connection string sets connect_timeout.
	ConnectTimeoutDefault = 5 * time.Second
	// EnvDatabaseURL names the environment variable read when --database
	// is not given.
	EnvDatabaseURL = "DATABASE_URL"
)

// Env is what a command reads from its process besides its arguments. The
// zero value reads nothing: no environment, no input, no terminal.
type Env struct {
	// Getenv reads an environment variable (DATABASE_URL). Nil reads none.
	Getenv func(key string) string
	// Stdin answers confirmation prompts. Nil is an empty input.
	Stdin io.Reader
	// Interactive reports that Stdin is a terminal a person types on. Only
	// then do the commands that destroy data ask for a confirmation;
	// otherwise they refuse without --yes.
	Interactive bool
	// Now is the clock heartbeat ages and relative --since times are
	// measured on. Nil uses the database's clock, on which PostgreSQL
	// records heartbeats and dead letters, so that ages stay right when
	// the operator's clock is off.
	Now func() time.Time

	// OutputTerminal reports that stdout is a terminal: status --watch
	// then redraws it, clearing it before each frame, rather than printing
	// the frames one after another.
	OutputTerminal bool

	// ticks, when set, replaces the ticker of the commands that repeat
	// (status --watch, rebuild --wait), whatever their --interval: a test
	// sends a tick when it wants the next round.
	ticks <-chan time.Time
}

// ProcessEnv returns the Env of the running process: its environment, its
// standard input, and whether that input and its standard output are
// terminals.
func ProcessEnv() Env {
	return Env{
		Getenv:         os.Getenv,
		Stdin:          os.Stdin,
		Interactive:    term.IsTerminal(int(os.Stdin.Fd())),
		OutputTerminal: term.IsTerminal(int(os.Stdout.Fd())),
	}
}

// Run runs the vantage command line args (without the program name),
// writing its output to stdout and its messages and prompts to stderr, and
// returns the exit code (ExitOK, ExitFailed, ExitUsage, ExitRefused or
// ExitNotFound). Cancelling ctx stops a command between, or during,
// database calls. Run keeps no state between calls and is safe for
// concurrent use.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, env Env) int {
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	if env.Stdin == nil {
		env.Stdin = strings.NewReader("")
	}
	a := &app{stdout: stdout, stderr: stderr, env: env}
	root := a.rootCommand()
	root.SetArgs(append([]string{}, args...))
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetIn(env.Stdin)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	code := ExitUsage // errors that did not come from a command's action are cobra's: bad flags and arguments
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	fmt.Fprintf(stderr, "vantage: %v\n", err)
	if code == ExitUsage && cmd != nil {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return code
}

// app holds the global flags and the streams of one Run.
type app struct {
	stdout, stderr io.Writer
	env            Env

	database string
	schema   string
	json     bool
	timeout  time.Duration
}

// rootHelp is the long help of the root command.
const rootHelp = `vantage operates the PostgreSQL schema of Vantage: migrations, the status
of perspectives and engine instances, dead letters, rebuild requests and
retired perspectives; 'vantage serve' shows them on a status page. It
runs no engine: the running instances carry out the rebuilds it requests.

The database comes from --database or else the DATABASE_URL environment
variable (a postgres:// URL or a key=value connection string); the schema
from --schema. Human-readable tables go to stdout; with --json, one JSON
document does instead (field names are stable; see each command's help).
Messages, warnings and prompts go to stderr.

Exit codes:
  0  ok, or nothing to do
  1  the operation failed (database unreachable, a statement failed, --timeout)
  2  usage error: unknown command or flag, bad argument; nothing was changed
  3  refused: live instances, confirmation declined or not possible, a
     dead letter whose status does not allow the action, a retired
     perspective, a finished rebuild (cancel), or a rebuild cancelled
     while 'rebuild --wait' followed it
  4  not found: an unknown dead letter id, rebuild request id or
     perspective`

const rootExample = `  export DATABASE_URL=postgres://vantage@db.internal:5432/app
  vantage migrate status
  vantage status --watch
  vantage instances
  vantage dead-letters list --perspective order_summary
  vantage dead-letters requeue 0197a3c4-5b6e-7f80-9a1b-2c3d4e5f6a7b
  vantage rebuild order_summary --wait
  VANTAGE_TOKEN=... vantage serve --addr 127.0.0.1:9090
  vantage --schema billing retire invoice_totals_v1 --drop-models --yes`

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:               "vantage",
		Short:             "Operate the PostgreSQL schema of Vantage",
		Long:              rootHelp,
		Example:           rootExample,
		Version:           version(),
		SilenceErrors:     true,
		SilenceUsage:      true,
		PersistentPreRunE: func(*cobra.Command, []string) error { return a.checkGlobalFlags() },
		RunE:              func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	flags := root.PersistentFlags()
	flags.StringVar(&a.database, "database", "", "PostgreSQL connection string: URL or key=value (default $DATABASE_URL)")
	flags.StringVar(&a.schema, "schema", postgres.SchemaDefault, "schema that holds the Vantage tables")
	flags.BoolVar(&a.json, "json", false, "print one JSON document on stdout instead of tables")
	flags.DurationVar(&a.timeout, "timeout", TimeoutDefault, "longest a database call may take (0: no limit)")
	root.AddCommand(
		a.migrateCommand(),
		a.statusCommand(),
		a.instancesCommand(),
		a.deadLettersCommand(),
		a.retireCommand(),
		a.reviveCommand(),
		a.serveCommand(),
		a.rebuildCommand(),
	)
	return root
}

// checkGlobalFlags rejects global flags no command can use.
func (a *app) checkGlobalFlags() error {
	if err := postgres.ValidateSchema(a.schema); err != nil {
		return usageError(fmt.Errorf("--schema: %w", err))
	}
	if a.timeout < 0 {
		return usageErrorf("--timeout must not be negative, got %s", a.timeout)
	}
	return nil
}

// groupCommand returns a command that only holds subcommands: alone it
// prints its help; with an argument that names none of them it fails as
// usage.
func groupCommand(use, short, long, example string) *cobra.Command {
	return &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    long,
		Example: example,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += "; did you mean " + strings.Join(s, " or ") + "?"
			}
			return errors.New(msg)
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
}

// action adapts a command's function to cobra: the error it returns
// carries its exit code (see exitCode), which tells it from cobra's own
// errors, all usage errors.
func (a *app) action(fn func(ctx context.Context, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := fn(cmd.Context(), args)
		if err == nil {
			return nil
		}
		var ee *exitError
		if errors.As(err, &ee) {
			return err
		}
		if errors.Is(err, context.DeadlineExceeded) && cmd.Context().Err() == nil {
			err = fmt.Errorf("%w (the database did not answer within --timeout %s)", err, a.timeout)
		}
		return &exitError{code: exitCode(err), err: err}
	}
}

// exitCode maps an error of an operation to the exit code that names its
// kind: the ports' sentinels and the migrator's refusal have their own.
func exitCode(err error) int {
	var ee *exitError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, postgres.ErrInstancesLive), errors.Is(err, ports.ErrVersionConflict):
		return ExitRefused
	case errors.Is(err, ports.ErrNotFound):
		return ExitNotFound
	case errors.Is(err, ports.ErrInvalidArgument):
		return ExitUsage
	}
	return ExitFailed
}

// exitError is an error with the exit code it ends the command with.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageError(err error) error { return &exitError{code: ExitUsage, err: err} }

func usageErrorf(format string, args ...any) error { return usageError(fmt.Errorf(format, args...)) }

func refusedErrorf(format string, args ...any) error {
	return &exitError{code: ExitRefused, err: fmt.Errorf(format, args...)}
}

func notFoundErrorf(format string, args ...any) error {
	return &exitError{code: ExitNotFound, err: fmt.Errorf(format, args...)}
}

// ticker returns the ticks of a command that repeats every d, and the
// function that stops them.
func (a *app) ticker(d time.Duration) (<-chan time.Time, func()) {
	if a.env.ticks != nil {
		return a.env.ticks, func() {}
	}
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// call returns ctx bounded by --timeout, for one database call.
func (a *app) call(ctx context.Context) (context.Context, context.CancelFunc) {
	if a.timeout == 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, a.timeout)
}

// warnf writes a warning to stderr.
func (a *app) warnf(format string, args ...any) {
	fmt.Fprintf(a.stderr, "vantage: warning: "+format+"\n", args...)
}

// version is the module version the binary was built from: the tag for
// go install ...@version, "(devel)" for a local build.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
