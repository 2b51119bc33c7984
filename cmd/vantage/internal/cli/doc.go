// Package cli implements the commands of the vantage operator tool: Run
// executes one command line in process, so the binary's main and the tests
// run commands the same way, with their output, prompts and exit code.
//
// # Commands
//
//	vantage migrate up                       apply the missing migrations
//	vantage migrate down [--to N] [--force]  revert migrations (confirmed; refused while instances are live)
//	vantage migrate status                   the schema's version, each migration applied or not
//	vantage migrate sql [--from N] [--to N] [--down]   print the migrations' SQL, run nothing
//	vantage status [--watch]                 perspectives, instances and rebuilds at a glance
//	vantage instances                        engine instances and their heartbeats
//	vantage dead-letters list                dead letters, oldest first, filtered
//	vantage dead-letters show ID             one dead letter in full, with its event
//	vantage dead-letters requeue ID...       apply dead letters' events again
//	vantage dead-letters requeue --perspective P | --all   the same in bulk (confirmed)
//	vantage dead-letters ignore ID...        never retry dead letters
//	vantage retire PERSPECTIVE [--drop-models]  stop and delete a perspective's work (confirmed)
//	vantage revive PERSPECTIVE               undo a retirement
//	vantage serve [--addr ADDR] [--token T]  serve the status page (package statuspage) until interrupted
//	vantage rebuild PERSPECTIVE [--wait]     request a rebuild that the running instances carry out
//	vantage rebuild list                     rebuild requests, newest first, with their progress
//	vantage rebuild cancel ID                stop a pending or running rebuild
//
// Global flags name the database (--database, else DATABASE_URL), the
// schema (--schema, validated as postgres.ValidateSchema does), the output
// (--json) and the bound of each database call (--timeout). Every command
// documents its JSON fields in its --help.
//
// # Exit codes
//
// [ExitOK], [ExitFailed], [ExitUsage], [ExitRefused] and [ExitNotFound].
// Bad input (an unknown command or flag, a malformed argument, no database)
// fails before anything is read or changed.
//
// # How commands are built
//
// Each command is a constructor on app that returns its *cobra.Command and
// runs its body through app.action, which maps the body's error to an exit
// code (see exitCode); errors made by usageErrorf and its siblings carry
// theirs. Commands that repeat (status --watch, rebuild --wait) take their
// ticks from app.ticker, which tests drive through Env. A body opens a
// session (app.connect, or app.open for the commands that use the adapter's
// ports), bounds each call with app.call, and prints a report: a struct
// whose JSON tags are its --json form and whose writeText is its table.
// Commands that destroy data ask through app.confirm.
package cli
