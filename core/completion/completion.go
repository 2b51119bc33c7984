// Package completion holds the completion strategies of the engine: how the
// outcome of applying a perspective (a ports.Completion or a ports.Failure)
// travels from the goroutine that applied it to the backend. A Worker uses
// one Strategy, built by the Factory of core.Options.Completion:
// BatchedFactory (the default), InstantFactory, or one of your own.
//
// Batched, the default, only records each outcome as a Pending tracked item.
// The engine periodically takes the Pending items, hands them to its
// flushers, marks them Sent and, once a flush really succeeded, marks exactly
// those items Acknowledged by their tracking ids. Items whose acknowledgement
// never comes are re-queued by ResetStale with a growing timeout. Instant
// reports each outcome to a Reporter at once: more round trips, and every
// outcome visible at once (tests, low traffic). An outcome whose report
// fails is kept as Batched keeps it, and travels the same way from then on.
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

// Factory builds the strategy of one Worker from what the engine gives it
// (see Config). BatchedFactory and InstantFactory build the built-in ones;
// a factory of your own may call one of them and wrap what it built (to
// observe it, say).
type Factory func(c Config) (Strategy, error)

// Config is what the engine gives a Factory.
type Config struct {
	// Reporter delivers outcomes to the backend at once and acknowledges
	// them (what Instant calls); a strategy that only keeps outcomes
	// Pending for the engine's flushers ignores it.
	Reporter Reporter
	// Resend are the timeouts after which outcomes sent and never
	// acknowledged are re-queued (core.Options.Retries.CompletionResend).
	Resend BatchedOptions
}

// BatchedFactory is the default Factory: NewBatched with the engine's
// resend timeouts.
func BatchedFactory(c Config) (Strategy, error) { return NewBatched(c.Resend) }

// InstantFactory builds the Instant strategy: NewInstantWith the engine's
// Reporter and resend timeouts.
func InstantFactory(c Config) (Strategy, error) { return NewInstantWith(c.Reporter, c.Resend) }

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

// holdsLocked reports whether an item of the pair (stream, perspective) is kept
// and not acknowledged yet. The caller holds b.mu.
func (b *Batched) holdsLocked(stream uuid.UUID, perspective string) bool {
	for _, it := range b.completions.items {
		if it.Status != Acknowledged && it.Item.StreamID == stream && it.Item.Perspective == perspective {
			return true
		}
	}
	for _, it := range b.failures.items {
		if it.Status != Acknowledged && it.Item.StreamID == stream && it.Item.Perspective == perspective {
			return true
		}
	}
	return false
}

// Instant reports every outcome to its Reporter at once. An outcome whose
// report fails is kept as a Pending tracked item, as Batched keeps every
// outcome: the engine's flushers send it again, with their retries, and
// ResetStale re-queues it until it is acknowledged. So is every later
// outcome of the same (stream, perspective) pair while one is kept, so that
// the backend gets a pair's outcomes in order and an outage costs one
// failed report per pair. An outcome the backend refuses is returned, not
// kept (see Refusals in the package doc). Safe for concurrent use if the
// Reporter is.
type Instant struct {
	r    Reporter
	kept *Batched
}

var _ Strategy = (*Instant)(nil)

// NewInstant returns an Instant strategy delivering to r, which must not be
// nil. Kept outcomes are re-queued with the default timeouts of Batched.
func NewInstant(r Reporter) *Instant {
	in, err := NewInstantWith(r, BatchedOptions{})
	if err != nil {
		panic(err) // the zero options are valid
	}
	return in
}

// NewInstantWith returns an Instant strategy delivering to r, which must not
// be nil, whose kept outcomes ResetStale re-queues with the timeouts of
// opts, as Batched's. It returns an error naming the field for an invalid
// option.
func NewInstantWith(r Reporter, opts BatchedOptions) (*Instant, error) {
	if r == nil {
		panic("completion: the Reporter of an Instant strategy must not be nil")
	}
	kept, err := NewBatched(opts)
	if err != nil {
		return nil, err
	}
	return &Instant{r: r, kept: kept}, nil
}

// ReportCompletion calls the Reporter's Complete with c alone, unless an
// outcome of c's pair is kept. It keeps c when the call fails, or when it
// was not made, and returns nil; it returns the error of a refusal.
func (in *Instant) ReportCompletion(ctx context.Context, c ports.Completion) error {
	return in.report(c.StreamID, c.Perspective, func() error { return in.r.Complete(ctx, []ports.Completion{c}) },
		func() { in.kept.completions.add(c) })
}

// ReportFailure calls the Reporter's Fail with f alone, unless an outcome of
// f's pair is kept. It keeps f as ReportCompletion keeps a completion.
func (in *Instant) ReportFailure(ctx context.Context, f ports.Failure) error {
	return in.report(f.StreamID, f.Perspective, func() error { return in.r.Fail(ctx, []ports.Failure{f}) },
		func() { in.kept.failures.add(f) })
}

// report delivers an outcome of the pair (stream, perspective) through
// deliver, or keeps it with keep, which it calls under the lock of the kept
// items.
func (in *Instant) report(stream uuid.UUID, perspective string, deliver func() error, keep func()) error {
	b := in.kept
	b.mu.Lock()
	behind := b.holdsLocked(stream, perspective)
	if behind {
		keep()
	}
	b.mu.Unlock()
	if behind {
		return nil
	}
	err := deliver()
	if err == nil {
		return nil
	}
	if retry.Permanent(err) {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	keep()
	return nil
}

// PendingCompletions returns copies of the kept completions that are
// Pending, ordered as Batched orders them.
func (in *Instant) PendingCompletions() []Tracked[ports.Completion] {
	return in.kept.PendingCompletions()
}

// PendingFailures returns copies of the kept failures that are Pending,
// ordered as Batched orders them.
func (in *Instant) PendingFailures() []Tracked[ports.Failure] { return in.kept.PendingFailures() }

// MarkSent marks the kept items with the given tracking ids Sent at at.
func (in *Instant) MarkSent(ids []uuid.UUID, at time.Time) { in.kept.MarkSent(ids, at) }

// MarkAcknowledged marks the kept items with the given tracking ids
// Acknowledged.
func (in *Instant) MarkAcknowledged(ids []uuid.UUID) { in.kept.MarkAcknowledged(ids) }

// ClearAcknowledged drops every Acknowledged kept item.
func (in *Instant) ClearAcknowledged() { in.kept.ClearAcknowledged() }

// ResetStale re-queues the kept items whose acknowledgement is overdue at
// now, as Batched does, and returns how many it re-queued.
func (in *Instant) ResetStale(now time.Time) int { return in.kept.ResetStale(now) }

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
