package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

// The rebuild scenario measures a rebuild of one perspective over the
// whole history, on PostgreSQL, asked for the way an operator asks for it:
// it seeds the catch-up's backlog, lets one instance with default options
// catch it up (timed as the catch-up scenario times it), then stores a
// request to rebuild the first perspective for every stream through the
// Admin port (RebuildRequest) and reads its progress (RebuildGet) every
// -rebuild-sample while the running worker claims it from its RebuildQueue and
// carries it out. The measured phase runs from the worker's claim to its
// finish, as its OnRebuildRequest hook reports them: it leaves out the
// wait for the worker's next look for requests
// (Options.Rewind.RebuildPollInterval, 5s by default), which is reported
// apart. Afterwards every perspective's models must be what they were
// before the rebuild, and nothing may be pending.

// rebuildRequestedBy is the RequestedBy of the scenario's request.
const rebuildRequestedBy = "bench"

// rebuildFigures are the rebuild scenario's own figures.
type rebuildFigures struct {
	// Perspective is the perspective rebuilt: the first.
	Perspective string `json:"perspective"`
	// SampleS is the interval of the progress samples, in seconds.
	SampleS float64 `json:"sample_s"`
	// The catch-up of the backlog before the rebuild, measured as the
	// catchup scenario measures it (its CPU per event counts every
	// perspective's applies).
	CatchupSeconds       float64 `json:"catchup_s"`
	CatchupEventsPerS    float64 `json:"catchup_events_per_s"`
	CatchupPeakRSSMB     float64 `json:"catchup_peak_rss_mb"`
	CatchupCPUMsPerEvent float64 `json:"catchup_cpu_ms_per_event"`
	// ClaimWaitS is the time from the request to the worker's claim, on
	// the database's clock; it is not part of the result's Seconds.
	ClaimWaitS float64 `json:"claim_wait_s"`
	// Status and the streams are the request's as it ended; StreamsPerS
	// is StreamsDone over the result's Seconds.
	Status       ports.RebuildStatus `json:"status"`
	StreamsDone  int64               `json:"streams_done"`
	StreamsTotal int64               `json:"streams_total"`
	StreamsPerS  float64             `json:"streams_per_s"`
	// Samples are the request's progress as RebuildGet read it every
	// SampleS, and once more when it ended.
	Samples []rebuildSample `json:"samples"`
	// ModelsBefore and ModelsAfter are the checksums of every
	// perspective's models, by perspective, before the request and after
	// the rebuild.
	ModelsBefore map[string]modelSum `json:"models_before,omitempty"`
	ModelsAfter  map[string]modelSum `json:"models_after,omitempty"`
	// Problems says what the check after the rebuild found wrong; a run
	// with any fails.
	Problems []string `json:"problems,omitempty"`
}

// rebuildSample is one reading of the request's progress.
type rebuildSample struct {
	// AtS is when it was read, in seconds from the request.
	AtS            float64             `json:"at_s"`
	Status         ports.RebuildStatus `json:"status"`
	StreamsDone    int64               `json:"streams_done"`
	StreamsTotal   int64               `json:"streams_total"`
	EventsReplayed int64               `json:"events_replayed"`
	// RemainingS is the request's own estimate of the time left
	// (ports.RebuildRequest.Remaining), nil while it has none.
	RemainingS *float64 `json:"remaining_s,omitempty"`
	// EventsPerS and StreamsPerS are the progress since the previous
	// reading (the request, for the first), per second.
	EventsPerS  float64 `json:"events_per_s"`
	StreamsPerS float64 `json:"streams_per_s"`
}

// nextRebuildSample returns the reading of req at, in time from the
// request, following prev (the zero sample for the first).
func nextRebuildSample(prev rebuildSample, req ports.RebuildRequest, at time.Duration) rebuildSample {
	s := rebuildSample{
		AtS: at.Seconds(), Status: req.Status,
		StreamsDone: req.StreamsDone, StreamsTotal: req.StreamsTotal, EventsReplayed: req.EventsReplayed,
	}
	if left, ok := req.Remaining(); ok {
		secs := left.Seconds()
		s.RemainingS = &secs
	}
	if d := s.AtS - prev.AtS; d > 0 {
		s.EventsPerS = float64(s.EventsReplayed-prev.EventsReplayed) / d
		s.StreamsPerS = float64(s.StreamsDone-prev.StreamsDone) / d
	}
	return s
}

// modelSum is the checksum of one perspective's models: their count and
// the md5 of the md5s of (stream_id, last_version, data), in stream order.
// The models' epochs are left out of it: a rebuild moves every rebuilt
// model to a later one, which MinEpoch and MaxEpoch show.
type modelSum struct {
	Models   int64  `json:"models"`
	MD5      string `json:"md5"`
	MinEpoch int64  `json:"min_epoch"`
	MaxEpoch int64  `json:"max_epoch"`
}

// sameModels reports whether a and b sum the same models.
func (a modelSum) sameModels(b modelSum) bool { return a.Models == b.Models && a.MD5 == b.MD5 }

// modelSums returns the checksum of every perspective's models.
func (v *vantage) modelSums(ctx context.Context) (map[string]modelSum, error) {
	rows, err := v.admin.Query(ctx, fmt.Sprintf(`SELECT perspective, count(*),
       md5(string_agg(md5(stream_id::text || ' ' || last_version || ' ' || data::text), '' ORDER BY stream_id)),
       min(epoch), max(epoch)
FROM %s.vantage_models GROUP BY perspective`, quoted(v.spec.Schema)))
	if err != nil {
		return nil, fmt.Errorf("summing the models: %w", err)
	}
	defer rows.Close()
	sums := map[string]modelSum{}
	for rows.Next() {
		var (
			name string
			sum  modelSum
		)
		if err := rows.Scan(&name, &sum.Models, &sum.MD5, &sum.MinEpoch, &sum.MaxEpoch); err != nil {
			return nil, fmt.Errorf("summing the models: %w", err)
		}
		sums[name] = sum
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("summing the models: %w", err)
	}
	return sums, nil
}

// rebuildProblems returns what is wrong after the rebuild of perspective
// on s's backlog: a request that did not end done, streams or events left
// out, models of perspective not saved again by the rebuild, models whose
// checksum changed, and anything pending in statuses.
func rebuildProblems(s spec, perspective string, final ports.RebuildRequest, before, after map[string]modelSum, statuses []ports.PerspectiveStatus) []string {
	var out []string
	if final.Status != ports.RebuildDone {
		p := fmt.Sprintf("the request ended %s", cmp.Or(string(final.Status), "unknown"))
		if final.Error != "" {
			p += ": " + final.Error
		}
		out = append(out, p)
	}
	if final.StreamsDone != int64(s.Streams) || final.StreamsTotal != int64(s.Streams) {
		out = append(out, fmt.Sprintf("rebuilt %d of %d streams (%d counted)", final.StreamsDone, s.Streams, final.StreamsTotal))
	}
	if final.EventsReplayed != int64(s.Events) {
		out = append(out, fmt.Sprintf("replayed %d events, want %d", final.EventsReplayed, s.Events))
	}
	if before[perspective].Models != int64(s.Streams) {
		out = append(out, fmt.Sprintf("%s had %d models before the rebuild, want %d", perspective, before[perspective].Models, s.Streams))
	}
	if b, a := before[perspective], after[perspective]; a.Models > 0 && a.MinEpoch <= b.MaxEpoch {
		out = append(out, fmt.Sprintf("some models of %s were not rebuilt: epochs %d-%d before, %d-%d after", perspective, b.MinEpoch, b.MaxEpoch, a.MinEpoch, a.MaxEpoch))
	}
	names := slices.Sorted(maps.Keys(before))
	for n := range after {
		if _, ok := before[n]; !ok {
			names = append(names, n)
		}
	}
	for _, n := range names {
		if b, a := before[n], after[n]; !b.sameModels(a) {
			out = append(out, fmt.Sprintf("the models of %s changed: %d models md5 %s before, %d md5 %s after", n, b.Models, b.MD5, a.Models, a.MD5))
		}
	}
	for _, st := range statuses {
		if st.Pending > 0 || st.PendingStreams > 0 || st.AwaitingRetry > 0 || st.RewindRequired > 0 || st.Failed > 0 || st.DeadLetters > 0 {
			out = append(out, fmt.Sprintf("%s is not settled: pending=%d pending_streams=%d awaiting_retry=%d rewind_required=%d failed=%d dead_letters=%d",
				st.Perspective, st.Pending, st.PendingStreams, st.AwaitingRetry, st.RewindRequired, st.Failed, st.DeadLetters))
		}
	}
	return out
}

// rebuildClock times a rebuild from the worker's OnRebuildRequest hook,
// which runs on the worker's rebuild goroutine: begin runs when the worker
// first reports perspective's request claimed, before it replays a stream,
// and end when it reports the request finished. The measured phase thus
// leaves out the wait for the worker's next look for requests, and the
// wait for the next progress sample. stop ends it from elsewhere (a
// request cancelled, a run out of time). Safe for concurrent use.
type rebuildClock struct {
	perspective   string
	begin         func()
	end           func(ports.RebuildRequest)
	claim, finish sync.Once
	// done is closed once end returned.
	done chan struct{}
}

func newRebuildClock(perspective string, begin func(), end func(ports.RebuildRequest)) *rebuildClock {
	return &rebuildClock{perspective: perspective, begin: begin, end: end, done: make(chan struct{})}
}

// observe is the worker's OnRebuildRequest hook.
func (c *rebuildClock) observe(req ports.RebuildRequest) {
	if req.Perspective != c.perspective {
		return
	}
	switch req.Status {
	case ports.RebuildRunning:
		c.claim.Do(c.begin)
	case ports.RebuildDone, ports.RebuildFailed:
		c.stop(req)
	}
}

// stop ends the phase, once, with req as it ended: after a begin in
// flight, and with none to follow.
func (c *rebuildClock) stop(req ports.RebuildRequest) {
	c.claim.Do(func() {})
	c.finish.Do(func() {
		c.end(req)
		close(c.done)
	})
}

// rebuild runs the rebuild scenario; see the comment at the top of the
// file.
func (v *vantage) rebuild(ctx context.Context) (*result, error) {
	s := v.spec
	r := newResult(s)
	f := &rebuildFigures{Perspective: v.names[0], SampleS: s.Sample.Seconds()}
	r.Rebuild = f
	// ph and phErr are written by the clock's begin, on the worker's
	// goroutine, and read once the clock stopped.
	var (
		ph    *phase
		phErr error
	)
	clock := newRebuildClock(f.Perspective,
		func() { ph, phErr = v.startPhase(ctx) },
		func(req ports.RebuildRequest) {
			if ph != nil {
				ph.end(r, req.EventsReplayed)
			}
		})

	cr := newResult(s)
	b, cph, err := v.catchUp(ctx, cr, core.Hooks{OnRebuildRequest: clock.observe})
	if cph != nil {
		// The workers run on: counters they have not published yet are
		// left out. With -profile, the rebuild's phase writes the profiles
		// again: they are the rebuild's.
		cph.report(ctx, cr.Events)
	}
	cr.finish()
	f.CatchupSeconds, f.CatchupPeakRSSMB = cr.Seconds, cr.PeakRSSMB
	f.CatchupEventsPerS, f.CatchupCPUMsPerEvent = cr.EventsPerS, cr.CPUMsPerEvent
	if err != nil {
		return r, fmt.Errorf("catching up: %w", err)
	}
	if f.ModelsBefore, err = v.modelSums(ctx); err != nil {
		return r, err
	}

	// The operator's side: the request and its progress, through the
	// Admin port of a store of its own pool.
	var admin ports.Admin = v.appStore
	req, err := admin.RebuildRequest(ctx, &ports.RebuildRequestParams{Perspective: f.Perspective, RequestedBy: rebuildRequestedBy})
	if err != nil {
		return r, fmt.Errorf("requesting the rebuild: %w", err)
	}
	final, ferr := v.followRebuild(ctx, admin, req.ID, clock, f)
	r.Events = final.EventsReplayed
	f.Status, f.StreamsDone, f.StreamsTotal = final.Status, final.StreamsDone, final.StreamsTotal
	if !final.StartedAt.IsZero() {
		f.ClaimWaitS = final.StartedAt.Sub(final.RequestedAt).Seconds()
	}
	if r.Seconds > 0 {
		f.StreamsPerS = float64(final.StreamsDone) / r.Seconds
	}
	v.stopWorkers(30 * time.Second)
	if ph != nil {
		ph.report(ctx, r.Events)
	}
	if phErr != nil {
		return r, fmt.Errorf("starting the rebuild's phase: %w", phErr)
	}
	if ferr != nil {
		return r, ferr
	}

	if f.ModelsAfter, err = v.modelSums(ctx); err != nil {
		return r, err
	}
	statuses, err := admin.PerspectivesStatus(ctx, &ports.PerspectivesStatusParams{})
	if err != nil {
		return r, fmt.Errorf("reading the perspectives' status: %w", err)
	}
	if err := v.check(ctx, r, b.streams, b.heads); err != nil {
		return r, err
	}
	f.Problems = rebuildProblems(s, f.Perspective, final, f.ModelsBefore, f.ModelsAfter, statuses)
	if r.Skipped > 0 || r.DoubleApplied > 0 || r.PendingAfter > 0 {
		f.Problems = append(f.Problems, fmt.Sprintf("the models' check: skipped=%d double=%d pending=%d", r.Skipped, r.DoubleApplied, r.PendingAfter))
	}
	if len(f.Problems) > 0 {
		return r, fmt.Errorf("after the rebuild: %s", strings.Join(f.Problems, "; "))
	}
	return r, nil
}

// followRebuild reads request id through admin every -rebuild-sample, printing
// each reading, until the clock stopped (the worker finished it), the
// request ended otherwise (an operator cancelled it), or the run's time
// is nearly out; it records the readings, the last once it ended, into f
// and returns the request as it ended, or as it stood.
func (v *vantage) followRebuild(ctx context.Context, admin ports.Admin, id uuid.UUID, clock *rebuildClock, f *rebuildFigures) (ports.RebuildRequest, error) {
	s := v.spec
	requested := time.Now()
	var (
		last ports.RebuildRequest
		prev rebuildSample
	)
	read := func() error {
		req, err := admin.RebuildGet(ctx, &ports.RebuildGetParams{ID: id})
		if err != nil {
			return fmt.Errorf("reading the rebuild request: %w", err)
		}
		last, prev = req, nextRebuildSample(prev, req, time.Since(requested))
		f.Samples = append(f.Samples, prev)
		fmt.Fprintf(os.Stderr, "  [%s] %s\n", s.name(), rebuildSampleRow(prev))
		return nil
	}
	fmt.Fprintf(os.Stderr, "  [%s] rebuild of %s requested (%s), progress every %s:\n  [%s] %s\n",
		s.name(), f.Perspective, id, s.Sample, s.name(), rebuildSampleHeader())
	tick := time.NewTicker(s.Sample)
	defer tick.Stop()
	limit := time.NewTimer(runLimit(ctx))
	defer limit.Stop()
	for {
		select {
		case <-clock.done:
			err := read() // the figures as finished
			return last, err
		case <-tick.C:
			if err := read(); err != nil {
				clock.stop(last)
				return last, err
			}
			switch last.Status {
			case ports.RebuildDone, ports.RebuildFailed, ports.RebuildCancelled:
				// Ended before the hook said so (done or failed: the
				// hook follows at once), or by a cancel.
				clock.stop(last)
				return last, nil
			}
		case <-limit.C:
			err := read()
			clock.stop(last)
			if err != nil {
				return last, err
			}
			return last, fmt.Errorf("not rebuilt %.0fs after the request (-timeout): %d of %d streams, %d events; the rates are those reached",
				time.Since(requested).Seconds(), last.StreamsDone, last.StreamsTotal, last.EventsReplayed)
		case <-ctx.Done():
			clock.stop(last)
			return last, ctx.Err()
		}
	}
}

// rebuildSampleHeader and rebuildSampleRow format the progress table.
func rebuildSampleHeader() string {
	return fmt.Sprintf("%9s %-9s %8s %8s %10s %11s %10s %9s", "elapsed_s", "status", "streams", "of", "events", "remaining_s", "events/s", "streams/s")
}

func rebuildSampleRow(smp rebuildSample) string {
	remaining := "-"
	if smp.RemainingS != nil {
		remaining = fmt.Sprintf("%.1f", *smp.RemainingS)
	}
	return fmt.Sprintf("%9.1f %-9s %8d %8d %10d %11s %10.0f %9.1f",
		smp.AtS, smp.Status, smp.StreamsDone, smp.StreamsTotal, smp.EventsReplayed, remaining, smp.EventsPerS, smp.StreamsPerS)
}

// printRebuilds writes each rebuild's progress table, then their result
// lines.
func printRebuilds(w io.Writer, rs []*result) {
	for _, r := range rs {
		if r.Rebuild == nil || len(r.Rebuild.Samples) == 0 {
			continue
		}
		fmt.Fprintf(w, "\nrebuild of %s, read every %s from the request (%d streams, %d events):\n%s\n",
			r.Rebuild.Perspective, time.Duration(r.Rebuild.SampleS*float64(time.Second)), r.Streams, r.Events, rebuildSampleHeader())
		for _, smp := range r.Rebuild.Samples {
			fmt.Fprintln(w, rebuildSampleRow(smp))
		}
	}
	fmt.Fprintf(w, "\n%-8s %-8s %4s %5s %8s %7s %9s %12s %7s %8s %10s %9s %8s %12s %6s  %s\n",
		"scenario", "backend", "inst", "persp", "events", "streams", "catchup_s", "catchup_ev/s", "wait_s", "seconds", "events/s", "streams/s", "rss_mb", "cpu_ms/event", "check", "notes")
	for _, r := range rs {
		f := r.Rebuild
		if f == nil {
			f = &rebuildFigures{}
		}
		check := "-"
		notes := ""
		switch {
		case r.Error != "":
			check, notes = "FAILED", "ERROR: "+r.Error
		case r.Checked:
			check = "ok"
			a := f.ModelsAfter[f.Perspective]
			epochs := fmt.Sprint(a.MinEpoch)
			if a.MaxEpoch != a.MinEpoch {
				epochs += fmt.Sprintf("-%d", a.MaxEpoch)
			}
			notes = fmt.Sprintf("%s: %d models saved again (epoch %s), md5 %s as before; the models of all %d perspectives unchanged, nothing pending;",
				f.Perspective, a.Models, epochs, shortMD5(a.MD5), len(f.ModelsAfter))
		}
		if r.Checked {
			notes += fmt.Sprintf(" skipped=%d double=%d pending=%d", r.Skipped, r.DoubleApplied, r.PendingAfter)
		}
		notes += fmt.Sprintf(" catch-up: rss=%.1fMB cpu_ms/event=%.3f", f.CatchupPeakRSSMB, f.CatchupCPUMsPerEvent)
		notes += cpuNote(r, 2)
		fmt.Fprintf(w, "%-8s %-8s %4d %5d %8d %7d %9.2f %12.0f %7.2f %8.2f %10.0f %9.1f %8.1f %12.3f %6s  %s\n",
			r.Scenario, r.Backend, r.Instances, r.Perspectives, r.Events, r.Streams, f.CatchupSeconds, f.CatchupEventsPerS, f.ClaimWaitS,
			r.Seconds, r.EventsPerS, f.StreamsPerS, r.PeakRSSMB, r.CPUMsPerEvent, check, strings.TrimSpace(notes))
	}
}

// shortMD5 returns the first 8 characters of a checksum.
func shortMD5(sum string) string { return sum[:min(len(sum), 8)] }
