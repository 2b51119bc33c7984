// Package completion holds the completion strategies of the engine: how the
// outcome of applying a perspective (a ports.Completion or a ports.Failure)
// travels from the goroutine that applied it to the backend. A Worker uses
// one Strategy, chosen by core.Options.Completion (Batched or Instant) or
// built by core.Options.CompletionStrategy, a Factory of your own.
//
// Batched, the default, only records each outcome as a Pending tracked item.
// The engine periodically takes the Pending items, hands them to its
// flushers, marks them Sent and, once a flush really succeeded, marks exactly
// those items Acknowledged by their tracking ids. Items whose acknowledgement
// never comes are re-queued by ResetStale with a growing timeout. Instant
// reports each outcome to a Reporter at once and tracks nothing: more
// round trips, and every outcome visible at once (tests, low traffic). An
// outcome whose report fails is given up on, as a refusal is.
//
// Acknowledgement is by identity, not by count: an acknowledgement can only
// ever settle the items it names, so an item sent on an idle tick cannot be
// settled by the acknowledgement of a later batch, nor leave that batch's
// items Sent to be sent again.
//
// # Refusals
//
// An outcome the backend refuses (an error wrapping ports.ErrInvalidArgument
// or ports.ErrNotFound) is not sent again: it would be refused again. The
// engine gives it up: when its flusher meets the refusal it settles the item
// (MarkAcknowledged, then ClearAcknowledged), and a Report method returns the
// refusal instead of keeping the outcome. Either way the rows the outcome
// covered are drained again after a backoff (rows the stored model already
// reflects complete without being applied again) and a failed event's pair
// is retried; nothing is charged to an event.
//
// # Writing a strategy
//
// A Strategy of your own must keep what it reports until it is
// acknowledged: the work rows of an outcome stay leased to the instance,
// and the engine's dedup cache holds them back, until their outcome is
// acknowledged. Report methods may deliver at once through the Reporter
// the Factory is given (as Instant does) or keep the outcome Pending for
// the engine's flushers (as Batched does); both may be mixed, and a
// strategy may embed a *Batched to keep what its Reporter could not
// deliver. A Report method that returns an error has neither delivered
// nor kept the outcome: the engine gives it up as it does a refusal. Every
// method is called concurrently from the engine's goroutines.
package completion

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/retry"
	"github.com/vantage-go/vantage/ports"
)

// Status is the state of a tracked item.
type Status int

// Tracked item states: Pending → Sent → Acknowledged, and Sent → Pending
// again when ResetStale finds its acknowledgement overdue.
const (
	// Pending items wait to be handed to a flusher.
	Pending Status = iota
	// Sent items were handed to a flusher and wait for its acknowledgement.
	Sent
	// Acknowledged items were flushed; ClearAcknowledged drops them.
	Acknowledged
)

// String returns the state's name.
func (s Status) String() string {
	switch s {
	case Pending:
		return "Pending"
	case Sent:
		return "Sent"
	case Acknowledged:
		return "Acknowledged"
	default:
		return fmt.Sprintf("Status(%d)", int(s))
	}
}

// Tracked is an outcome held by a strategy until it is acknowledged.
type Tracked[T any] struct {
	// ID is the tracking id, random and unique per reported item. MarkSent
	// and MarkAcknowledged address items by it.
	ID uuid.UUID
	// Item is the reported outcome. It is shared with the strategy: callers
	// must not modify it or the slices it holds.
	Item T
	// Status is the item's state.
	Status Status
	// SentAt is when the item was last marked Sent; zero until then.
	SentAt time.Time
	// RetryCount counts how often ResetStale re-queued the item.
	RetryCount int
}

// Reporter delivers outcomes to the backend immediately. The Instant
// strategy calls it once per reported item. The engine's Reporter records
// every failed call in its log of failing operations, and settles what it
// delivered (the dedup retention of its rows starts, a failed event's
// retry is scheduled).
type Reporter interface {
	// Complete records completions. An error means they were not recorded
	// (or it is unknown whether they were).
	Complete(ctx context.Context, items []ports.Completion) error
	// Fail records failures, with the same errors as Complete.
	Fail(ctx context.Context, items []ports.Failure) error
}

// Factory builds the strategy of one Worker. r delivers outcomes to the
// backend at once and acknowledges them (what Instant calls); a strategy
// that only keeps outcomes Pending for the engine's flushers ignores it.
type Factory func(r Reporter) (Strategy, error)

// Strategy decides when outcomes reach the backend. Implementations are safe
// for concurrent use.
type Strategy interface {
	// ReportCompletion delivers a completion or keeps it until it is
	// acknowledged. An error says it did neither: the engine gives the
	// completion up (see Refusals in the package doc).
	ReportCompletion(ctx context.Context, c ports.Completion) error
	// ReportFailure delivers or keeps a failure, with the errors of
	// ReportCompletion.
	ReportFailure(ctx context.Context, f ports.Failure) error
	// PendingCompletions returns copies of the Pending completions, ordered
	// by SentAt (never-sent items first) and then by report order.
	PendingCompletions() []Tracked[ports.Completion]
	// PendingFailures returns copies of the Pending failures, ordered like
	// PendingCompletions.
	PendingFailures() []Tracked[ports.Failure]
	// MarkSent marks the Pending or Sent items with the given tracking ids
	// Sent at at. Unknown and Acknowledged ids are ignored.
	MarkSent(ids []uuid.UUID, at time.Time)
	// MarkAcknowledged marks the items with the given tracking ids
	// Acknowledged, whatever their state: a late acknowledgement of an item
	// ResetStale already re-queued still settles it. Unknown ids are ignored.
	// The engine settles this way the items the backend refused too.
	MarkAcknowledged(ids []uuid.UUID)
	// ClearAcknowledged drops every Acknowledged item.
	ClearAcknowledged()
	// ResetStale re-queues every Sent item whose acknowledgement is overdue
	// at now and returns how many it re-queued.
	ResetStale(now time.Time) int
}

// Defaults of BatchedOptions, as the engine uses them: a Sent item is
// re-queued after 1 s, 2 s, 4 s … capped at 60 s.
const (
	BaseTimeoutDefault = time.Second
	MultiplierDefault  = 2.0
	MaxTimeoutDefault  = 60 * time.Second
)

// BatchedOptions configure the Batched strategy's ResetStale timeouts. The
// zero value is valid.
//
// The n-th re-queue of an item (RetryCount n) happens once it has been Sent
// for strictly longer than BaseTimeout × Multiplier^n, capped at MaxTimeout.
type BatchedOptions struct {
	// BaseTimeout is the wait for a first acknowledgement. Must not be
	// negative. Defaults to BaseTimeoutDefault.
	BaseTimeout time.Duration
	// Multiplier grows the timeout per retry. Must be at least 1 (and a
	// number). Defaults to MultiplierDefault.
	Multiplier float64
	// MaxTimeout caps the timeout. Must not be negative nor below
	// BaseTimeout. Defaults to MaxTimeoutDefault.
	MaxTimeout time.Duration
	// DisableExponentialBackoff makes the multiplier 1: every timeout is
	// BaseTimeout. Defaults to false (exponential backoff enabled), so that
	// the zero value gives the engine's defaults.
	DisableExponentialBackoff bool
}

// Batched is the default strategy: outcomes wait as Pending items until the
// engine flushes them. Safe for concurrent use.
type Batched struct {
	// backoff gives the timeout of each retry count.
	backoff retry.Backoff

	mu          sync.Mutex
	completions tracker[ports.Completion]
	failures    tracker[ports.Failure]
}

var _ Strategy = (*Batched)(nil)

// NewBatched returns an empty Batched strategy. It returns an error naming
// the field for an invalid option.
func NewBatched(opts BatchedOptions) (*Batched, error) {
	bo := retry.Backoff{
		Initial:    cmp.Or(opts.BaseTimeout, BaseTimeoutDefault),
		Max:        cmp.Or(opts.MaxTimeout, MaxTimeoutDefault),
		Multiplier: cmp.Or(opts.Multiplier, MultiplierDefault),
	}
	var errs []error
	if opts.BaseTimeout < 0 {
		errs = append(errs, fmt.Errorf("BatchedOptions.BaseTimeout must not be negative, got %s", opts.BaseTimeout))
	}
	if opts.MaxTimeout < 0 {
		errs = append(errs, fmt.Errorf("BatchedOptions.MaxTimeout must not be negative, got %s", opts.MaxTimeout))
	}
	if !(bo.Multiplier >= 1) { // also rejects NaN
		errs = append(errs, fmt.Errorf("BatchedOptions.Multiplier must be at least 1, got %g", opts.Multiplier))
	}
	if len(errs) == 0 && bo.Max < bo.Initial {
		errs = append(errs, fmt.Errorf("BatchedOptions.MaxTimeout (%s) must not be below BatchedOptions.BaseTimeout (%s)", bo.Max, bo.Initial))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if opts.DisableExponentialBackoff {
		bo.Multiplier = 1
	}
	return &Batched{backoff: bo}, nil
}

// ReportCompletion records c as a Pending item. It never blocks and never
// fails.
func (b *Batched) ReportCompletion(_ context.Context, c ports.Completion) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.completions.add(c)
	return nil
}

// ReportFailure records f as a Pending item. It never blocks and never
// fails.
func (b *Batched) ReportFailure(_ context.Context, f ports.Failure) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures.add(f)
	return nil
}

// PendingCompletions returns copies of the Pending completions, ordered by
// SentAt and then by report order.
func (b *Batched) PendingCompletions() []Tracked[ports.Completion] {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.completions.pending()
}

// PendingFailures returns copies of the Pending failures, ordered by SentAt
// and then by report order.
func (b *Batched) PendingFailures() []Tracked[ports.Failure] {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.failures.pending()
}

// MarkSent marks the Pending or Sent items with the given tracking ids Sent
// at at.
func (b *Batched) MarkSent(ids []uuid.UUID, at time.Time) {
	set := idSet(ids)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.completions.markSent(set, at)
	b.failures.markSent(set, at)
}

// MarkAcknowledged marks the items with the given tracking ids Acknowledged.
func (b *Batched) MarkAcknowledged(ids []uuid.UUID) {
	set := idSet(ids)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.completions.markAcknowledged(set)
	b.failures.markAcknowledged(set)
}

// ClearAcknowledged drops every Acknowledged item.
func (b *Batched) ClearAcknowledged() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.completions.clearAcknowledged()
	b.failures.clearAcknowledged()
}

// ResetStale moves back to Pending, with RetryCount+1, every Sent item for
// which now − SentAt > Timeout(RetryCount), and returns how many it moved.
func (b *Batched) ResetStale(now time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.completions.resetStale(now, b.Timeout) + b.failures.resetStale(now, b.Timeout)
}

// Timeout returns how long an item with the given RetryCount may stay Sent:
// BaseTimeout × Multiplier^retryCount, capped at MaxTimeout (the delay of
// retry.Backoff, without jitter). A growth that would overflow is capped
// too.
func (b *Batched) Timeout(retryCount int) time.Duration {
	return b.backoff.Delay(retryCount)
}

// Instant reports every outcome to its Reporter at once and tracks nothing.
// Safe for concurrent use if the Reporter is.
type Instant struct {
	r Reporter
}

var _ Strategy = (*Instant)(nil)

// NewInstant returns an Instant strategy delivering to r, which must not be
// nil.
func NewInstant(r Reporter) *Instant {
	if r == nil {
		panic("completion.NewInstant: Reporter must not be nil")
	}
	return &Instant{r: r}
}

// ReportCompletion calls the Reporter's Complete with c alone and returns its
// error: an outcome it could not deliver is given up on.
func (in *Instant) ReportCompletion(ctx context.Context, c ports.Completion) error {
	return in.r.Complete(ctx, []ports.Completion{c})
}

// ReportFailure calls the Reporter's Fail with f alone and returns its error.
func (in *Instant) ReportFailure(ctx context.Context, f ports.Failure) error {
	return in.r.Fail(ctx, []ports.Failure{f})
}

// PendingCompletions returns nil: nothing is ever pending.
func (*Instant) PendingCompletions() []Tracked[ports.Completion] { return nil }

// PendingFailures returns nil: nothing is ever pending.
func (*Instant) PendingFailures() []Tracked[ports.Failure] { return nil }

// MarkSent does nothing.
func (*Instant) MarkSent([]uuid.UUID, time.Time) {}

// MarkAcknowledged does nothing.
func (*Instant) MarkAcknowledged([]uuid.UUID) {}

// ClearAcknowledged does nothing.
func (*Instant) ClearAcknowledged() {}

// ResetStale does nothing and returns 0.
func (*Instant) ResetStale(time.Time) int { return 0 }

// tracker holds the items of one kind in report order. It is guarded by the
// owning strategy's mutex.
type tracker[T any] struct {
	items []Tracked[T]
}

func (t *tracker[T]) add(item T) {
	t.items = append(t.items, Tracked[T]{ID: uuid.New(), Item: item, Status: Pending})
}

func (t *tracker[T]) pending() []Tracked[T] {
	var out []Tracked[T]
	for _, it := range t.items {
		if it.Status == Pending {
			out = append(out, it)
		}
	}
	// Stable: items with equal SentAt keep report order.
	slices.SortStableFunc(out, func(a, b Tracked[T]) int { return a.SentAt.Compare(b.SentAt) })
	return out
}

func (t *tracker[T]) markSent(ids map[uuid.UUID]struct{}, at time.Time) {
	for i := range t.items {
		it := &t.items[i]
		if _, ok := ids[it.ID]; ok && it.Status != Acknowledged {
			it.Status, it.SentAt = Sent, at
		}
	}
}

func (t *tracker[T]) markAcknowledged(ids map[uuid.UUID]struct{}) {
	for i := range t.items {
		if _, ok := ids[t.items[i].ID]; ok {
			t.items[i].Status = Acknowledged
		}
	}
}

func (t *tracker[T]) clearAcknowledged() {
	t.items = slices.DeleteFunc(t.items, func(it Tracked[T]) bool { return it.Status == Acknowledged })
}

func (t *tracker[T]) resetStale(now time.Time, timeout func(int) time.Duration) int {
	n := 0
	for i := range t.items {
		it := &t.items[i]
		if it.Status == Sent && now.Sub(it.SentAt) > timeout(it.RetryCount) {
			it.Status = Pending
			it.RetryCount++
			n++
		}
	}
	return n
}

func idSet(ids []uuid.UUID) map[uuid.UUID]struct{} {
	set := make(map[uuid.UUID]struct{}, len(ids))
	for _, id := range ids {
		set[id] = struct{}{}
	}
	return set
}
