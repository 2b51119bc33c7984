package main

import (
	"context"
	"time"
)

// pace releases the numbers 0, 1, 2, ... of the events to append on the
// returned channel: every millisecond it releases those that due says the
// schedule has released by then (due gets the time elapsed since start),
// until total has elapsed, ctx ends or stop is closed (nil: never); then
// it closes the channel. The channel buffers buffer numbers, so appenders
// that fall behind delay the releases, never the schedule.
func pace(ctx context.Context, start time.Time, total time.Duration, buffer int, stop <-chan struct{}, due func(elapsed time.Duration) int) <-chan int {
	jobs := make(chan int, buffer)
	go func() {
		defer close(jobs)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		next := 0
		for {
			select {
			case <-ctx.Done():
				return
			case <-stop:
				return
			case now := <-t.C:
				elapsed := now.Sub(start)
				if elapsed >= total {
					return
				}
				for n := due(elapsed); next < n; next++ {
					select {
					case jobs <- next:
					case <-ctx.Done():
						return
					case <-stop:
						return
					}
				}
			}
		}
	}()
	return jobs
}

// steady is the due of pace at a constant rate: event i is released at
// start + i/rate.
func steady(rate int) func(time.Duration) int {
	return func(elapsed time.Duration) int { return int(elapsed.Seconds() * float64(rate)) }
}
