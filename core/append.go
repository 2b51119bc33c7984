package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/retry"
	"github.com/vantage-go/vantage/ports"
)

// Retries of Registry.Append after a transient failure: at most
// appendRetries more calls, waiting appendRetry in between (50ms growing by
// half, at most 1s, each wait spread by ±50%).
const appendRetries = 4

var appendRetry = retry.Backoff{Initial: 50 * time.Millisecond, Max: time.Second, Multiplier: 1.5, Jitter: 0.5}

// Append encodes events with the registry and appends them to a stream.
// Each event stores the metadata of ctx (see MetadataFromContext): the
// scope of WithScope, the correlation id of WithCorrelationID, the headers
// of WithHeaders, the W3C trace context of ctx's span (which the spans of
// the event's applies link to) and, inside a handler, the handled event as
// causation and its correlation id unless ctx sets one. The events carry
// the registry's subscriptions of their types, which the store registers
// as it appends them (retired perspectives excepted), so they fan out to
// every perspective of the registry that applies them. expectedVersion
// follows ports.EventsAppendParams.ExpectedVersion.
//
// Append gives every event its id (a UUIDv7) before the first call, so it
// can retry safely: when the store fails with ports.ErrTransient (say, the
// connection broke around the commit, and whether the append took effect is
// unknown), Append calls it again, up to four more times within about two
// seconds and ctx, with the same ids. A repeat of an append that took
// effect returns the stored events (AlreadyStored set); any other error is
// returned at once, and a version conflict is never retried.
//
// To append in a transaction of your own, use AppendTx.
func (r *Registry) Append(ctx context.Context, store ports.EventStore, streamID uuid.UUID, expectedVersion int64, events ...any) (*ports.EventsAppendResult, error) {
	params, err := r.appendParams(ctx, streamID, expectedVersion, events)
	if err != nil {
		return nil, err
	}
	b := backoff.WithContext(backoff.WithMaxRetries(appendRetry.New(ports.SystemClock{}), appendRetries), ctx)
	return backoff.RetryWithData(func() (*ports.EventsAppendResult, error) {
		res, err := store.EventsAppend(ctx, params)
		if err != nil && !errors.Is(err, ports.ErrTransient) {
			return nil, backoff.Permanent(err)
		}
		return res, err
	}, b)
}

// AppendTx is Registry.Append inside a transaction the caller owns, so
// that the caller's business writes and the events commit or roll back
// together: with the PostgreSQL adapter, store is the *postgres.Store and
// tx a pgx.Tx of its pool (Tx is inferred from tx). The events are encoded,
// given their ids and the metadata of ctx, and carry the registry's
// subscriptions, as with Append; the wake notification is sent when tx
// commits, and a rolled back tx stores nothing.
//
// AppendTx calls the store once and never retries: an error may have
// aborted tx, and after a broken connection only the caller can tell
// whether tx committed. Roll back and retry the whole transaction instead;
// the retry's events get new ids, so the business writes must tell, as
// they do for any transaction, whether an earlier attempt committed.
func AppendTx[Tx any](ctx context.Context, r *Registry, store ports.TxEventStore[Tx], tx Tx, streamID uuid.UUID, expectedVersion int64, events ...any) (*ports.EventsAppendResult, error) {
	params, err := r.appendParams(ctx, streamID, expectedVersion, events)
	if err != nil {
		return nil, err
	}
	return store.AppendTx(ctx, tx, params)
}

// appendParams encodes events for an append to a stream: every event with
// its id, given here so that a retry repeats the same append, and the
// metadata of ctx; the call with the registry's subscriptions of their
// types. The subscriptions go with the events so that the store registers
// them in the same step, and the append fans out to every perspective of
// this registry that applies them, whatever the store had recorded.
func (r *Registry) appendParams(ctx context.Context, streamID uuid.UUID, expectedVersion int64, events []any) (*ports.EventsAppendParams, error) {
	if len(events) == 0 {
		return nil, fmt.Errorf("appending to stream %s: %w: no events", streamID, ports.ErrInvalidArgument)
	}
	md := MetadataFromContext(ctx)
	news := make([]ports.NewEvent, 0, len(events))
	for _, e := range events {
		ne, err := r.Encode(e)
		if err != nil {
			return nil, fmt.Errorf("appending to stream %s: %w", streamID, err)
		}
		if ne.ID, err = uuid.NewV7(); err != nil {
			return nil, fmt.Errorf("appending to stream %s: generating event id: %w", streamID, err)
		}
		ne.Metadata = md.Clone()
		news = append(news, ne)
	}
	return &ports.EventsAppendParams{
		StreamID:        streamID,
		ExpectedVersion: expectedVersion,
		Events:          news,
		Subscriptions:   r.subscriptionsOf(news),
	}, nil
}
