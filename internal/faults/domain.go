package faults

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/vantage-go/vantage/core"
)

// Names stored with the suite's events, work rows and models.
const (
	// EventType is the type name of Step, the suite's only event type.
	EventType = "faults.step"
	// HistoryPerspective records, per stream, the version of every event
	// it applied, in the order applied (History).
	HistoryPerspective = "fault_history"
	// CountPerspective counts the events it applied (Count).
	CountPerspective = "fault_count"
)

// Perspectives are the perspectives the workers run.
var Perspectives = []string{HistoryPerspective, CountPerspective}

// Fault instructions a Step can carry in its Fault field.
const (
	// FaultPoison makes the apply return an error (unless the worker runs
	// with the fix, -fixed).
	FaultPoison = "poison"
	// FaultHangCtx makes the apply block until its context is done, then
	// return the context's error.
	FaultHangCtx = "hang_ctx"
	// FaultHang makes the apply block for HangMS milliseconds ignoring its
	// context, then succeed.
	FaultHang = "hang"
	// FaultUndecodable marks a payload that does not decode into Step: it
	// is appended as raw JSON (see undecodablePayload), never through the
	// registry, and no apply function ever sees it.
	FaultUndecodable = "undecodable"
)

// Step is the suite's event. A Step without Fault is healthy.
type Step struct {
	// Seq is unique within a run: an appender that lost the outcome of an
	// append looks its Seq up to learn whether it was stored.
	Seq int64 `json:"seq"`
	// Fault is the fault instruction, empty for a healthy event.
	Fault string `json:"fault,omitempty"`
	// HangMS is how long a FaultHang apply blocks.
	HangMS int64 `json:"hang_ms,omitempty"`
}

// undecodablePayload is a Step whose seq is a string: valid JSON that does
// not decode into Step, with the fault readable by the checks and the seq
// by an appender looking for it (as the text "u<seq>").
func undecodablePayload(seq int64) []byte {
	return fmt.Appendf(nil, `{"seq": "u%d", "fault": %q}`, seq, FaultUndecodable)
}

// History is the model of HistoryPerspective: the versions applied, in
// order, so the checks see lost, skipped, reordered and repeated events.
type History struct {
	Versions []int64 `json:"versions"`
}

// Count is the model of CountPerspective: how many events were applied.
type Count struct {
	N int64 `json:"n"`
}

// errPoison is what a poison event's apply returns.
var errPoison = errors.New("poison event")

// NewRegistry returns the registry of the workers and the appenders: Step
// and both perspectives. fixed makes poison events apply like healthy ones
// (the deploy with the fix).
func NewRegistry(fixed bool) (*core.Registry, error) {
	reg := core.NewRegistry()
	if err := core.RegisterEvent[Step](reg, EventType); err != nil {
		return nil, err
	}
	misbehave := func(ctx context.Context, s Step) error {
		switch s.Fault {
		case FaultPoison:
			if !fixed {
				return fmt.Errorf("%w (seq %d)", errPoison, s.Seq)
			}
		case FaultHangCtx:
			<-ctx.Done()
			return ctx.Err()
		case FaultHang:
			// Ignoring ctx is the fault: an apply stuck in code that does
			// not honour cancellation.
			time.Sleep(time.Duration(s.HangMS) * time.Millisecond)
		}
		return nil
	}
	history := core.NewPerspective[History](HistoryPerspective)
	if err := core.Handle(history, func(ctx context.Context, m History, s Step) (History, error) {
		if err := misbehave(ctx, s); err != nil {
			return m, err
		}
		ev, ok := core.EventFromContext(ctx)
		if !ok {
			return m, errors.New("no event in the apply context")
		}
		// Clip: never write into an array the engine's previous model
		// value may share, whatever the engine does with it.
		m.Versions = append(slices.Clip(m.Versions), ev.Version)
		return m, nil
	}); err != nil {
		return nil, err
	}
	count := core.NewPerspective[Count](CountPerspective)
	if err := core.Handle(count, func(ctx context.Context, m Count, s Step) (Count, error) {
		if err := misbehave(ctx, s); err != nil {
			return m, err
		}
		m.N++
		return m, nil
	}); err != nil {
		return nil, err
	}
	for _, p := range []core.Registrable{history, count} {
		if err := reg.AddPerspective(p); err != nil {
			return nil, err
		}
	}
	return reg, nil
}
