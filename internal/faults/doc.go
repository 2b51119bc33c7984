// Package faults is Vantage's fault suite: it proves, against real
// processes and a real PostgreSQL, that every event is applied once and in
// order and that a bad or slow event never costs a good one.
//
// Run starts a private PostgreSQL cluster (internal/pgtest), then, for each
// scenario, migrates a fresh schema, starts worker processes (WorkerMain,
// one core.Worker each, with two model perspectives and a table
// projection), appends events to many streams at a steady rate from
// in-process appenders, injects one fault (a killed or paused worker,
// severed connections, a lock on the lease table, connections cut during
// projection writes, a PostgreSQL restart, an event whose apply fails,
// hangs or cannot be decoded, ...), stops appending, waits (bounded) until
// the workers caught up, and checks the database: every stream's models
// and projection rows against its events, and how long the healthy events
// waited. The checks, the recovery time, the delays and the scenarios are
// described in RELIABILITY.md at the root of the repository.
//
// The worker processes are this program itself, run again with WorkerEnv
// set: a main (or a TestMain) calls WorkerMain first when IsWorker reports
// true, so the workers always run the code under test.
package faults
