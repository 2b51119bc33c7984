// Command faultworker is one worker process of the fault suite: a
// core.Worker over PostgreSQL running the suite's perspectives with short
// options, until SIGTERM or SIGINT. The suite starts its own executable as
// the worker; this command runs one by hand:
//
//	go run ./internal/faults/cmd/faultworker -db "postgres://postgres@127.0.0.1:5432/test?application_name=w1" -schema faults -log w1.log
package main

import (
	"os"

	"github.com/vantage-go/vantage/internal/faults"
)

func main() { os.Exit(faults.WorkerMain(os.Args[1:])) }
