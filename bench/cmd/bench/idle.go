package main

import (
	"context"
	"fmt"
	"time"

	"github.com/vantage-go/vantage/core"
)

// idleSettle is how long the idle scenario lets the instance start before
// measuring: long enough for its start-up work (registering the instance
// and the subscriptions, the first claims and polls) to be over, so that
// the window holds only what it does for as long as nothing happens.
const idleSettle = 5 * time.Second

// idle runs one instance with nothing to do and measures what it costs
// over the spec's Duration, after idleSettle: the CPU time of this process
// and of the instance's PostgreSQL backends, and the statements and pings
// its connections sent. Nothing is appended, so there is no model to
// check.
func (v *vantage) idle(ctx context.Context) (*result, error) {
	s := v.spec
	r := newResult(s)
	if err := v.startWorkers(ctx, func(int) core.Hooks { return core.Hooks{} }); err != nil {
		return r, err
	}
	select {
	case <-time.After(idleSettle):
	case <-ctx.Done():
		return r, ctx.Err()
	}
	ph, err := v.startPhase(ctx)
	if err != nil {
		return r, err
	}
	stmts0, pings0 := v.sql.Calls(), v.pings.Load()
	stop := make(chan struct{})
	go progress(ctx, stop, s.name(), func() string {
		return fmt.Sprintf("%d statements, %d pings", v.sql.Calls()-stmts0, v.pings.Load()-pings0)
	})
	select {
	case <-time.After(s.Duration):
	case <-ctx.Done():
		close(stop)
		return r, ctx.Err()
	}
	close(stop)
	stmts, pings := v.sql.Calls()-stmts0, v.pings.Load()-pings0
	ph.end(r, 0)
	v.stopWorkers(30 * time.Second)
	ph.report(ctx, 0)
	perMin := time.Minute.Seconds() / r.Seconds
	r.Idle = &idleFigures{
		GoCPUSPerMin:     r.GoCPUSeconds * perMin,
		PGCPUSPerMin:     r.PGCPUSeconds * perMin,
		CPUSPerMin:       (r.GoCPUSeconds + r.PGCPUSeconds) * perMin,
		Statements:       stmts,
		StatementsPerMin: float64(stmts) * perMin,
		Pings:            pings,
		PingsPerMin:      float64(pings) * perMin,
	}
	return r, nil
}
