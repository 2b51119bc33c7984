// Command vantage operates the PostgreSQL schema of Vantage: it migrates the
// schema, lists engine instances and dead letters, requeues or ignores dead
// letters, requests rebuilds that running instances carry out, and retires
// or revives perspectives.
//
//	go install github.com/vantage-go/vantage/cmd/vantage@latest
//	vantage --help
//
// Every command and its exit codes are described by its --help and in the
// Operations guide (docs/operations.md).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/vantage-go/vantage/cmd/vantage/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr, cli.ProcessEnv())
	stop()
	os.Exit(code)
}
