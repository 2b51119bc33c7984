package modelstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/ports"
)

// combiner groups concurrent calls into batches (group commit): a caller
// that finds fewer than maxSenders batches in flight becomes a sender and
// sends everything queued, in calls of at most limit requests, until the
// queue is empty; the others wait for their result. An idle combiner adds no
// delay (the first request is sent at once); under load, requests that
// arrive while a batch is in flight go together in the next one.
//
// A batch is sent with the first sender's context detached from its
// cancellation and bounded by timeout, so a shutting-down caller never
// fails the requests of others it happens to carry.
type combiner[Req, Res any] struct {
	send       func(ctx context.Context, reqs []Req) ([]Res, error)
	maxSenders int
	limit      int
	timeout    time.Duration

	mu      sync.Mutex
	queue   []*combined[Req, Res]
	senders int
}

type combined[Req, Res any] struct {
	req  Req
	res  Res
	err  error
	done chan struct{}
}

func newCombiner[Req, Res any](maxSenders, limit int, timeout time.Duration, send func(context.Context, []Req) ([]Res, error)) *combiner[Req, Res] {
	return &combiner[Req, Res]{send: send, maxSenders: maxSenders, limit: limit, timeout: timeout}
}

// do queues req and returns its result once a batch carrying it was sent.
func (c *combiner[Req, Res]) do(ctx context.Context, req Req) (Res, error) {
	item := &combined[Req, Res]{req: req, done: make(chan struct{})}
	c.mu.Lock()
	c.queue = append(c.queue, item)
	if c.senders >= c.maxSenders {
		c.mu.Unlock()
		<-item.done
		return item.res, item.err
	}
	c.senders++
	for len(c.queue) > 0 {
		n := min(len(c.queue), c.limit)
		batch := slices.Clone(c.queue[:n])
		c.queue = slices.Delete(c.queue, 0, n)
		c.mu.Unlock()
		c.sendBatch(ctx, batch)
		c.mu.Lock()
	}
	c.senders--
	c.mu.Unlock()
	<-item.done
	return item.res, item.err
}

func (c *combiner[Req, Res]) sendBatch(ctx context.Context, batch []*combined[Req, Res]) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	defer cancel()
	reqs := make([]Req, len(batch))
	for i, it := range batch {
		reqs[i] = it.req
	}
	res, err := c.send(sctx, reqs)
	if err == nil && len(res) != len(batch) {
		err = fmt.Errorf("backend returned %d results for %d requests", len(res), len(batch))
	}
	for i, it := range batch {
		if err != nil {
			it.err = err
		} else {
			it.res = res[i]
		}
		close(it.done)
	}
}

// modelCombineLimit bounds the pairs of one batched model load or save.
const modelCombineLimit = 256

// txSaveCombineLimit bounds the pairs of one grouped save of table
// projections. Each pair runs in a savepoint of the transaction, and
// PostgreSQL caches at most 64 subtransactions of a transaction in shared
// memory: past that, every other session's snapshot checks consult
// pg_subtrans while the transaction is open, slowing the whole server.
const txSaveCombineLimit = 64

// modelBatches groups model loads and saves when the backend has a
// ports.ModelBatchStore (Backend.ModelBatch).
type modelBatches struct {
	loads *combiner[ports.Pair, ports.StoredModel]
	saves *combiner[*ports.ModelSaveParams, error]
}

func newModelBatches(mb ports.ModelBatchStore, timeout time.Duration) *modelBatches {
	if mb == nil {
		return nil
	}
	return &modelBatches{
		loads: newCombiner(2, modelCombineLimit, timeout, func(ctx context.Context, pairs []ports.Pair) ([]ports.StoredModel, error) {
			found, err := mb.ModelLoadMany(ctx, &ports.ModelLoadManyParams{Pairs: pairs})
			if err != nil {
				return nil, err
			}
			byPair := make(map[ports.Pair]ports.StoredModel, len(found))
			for _, m := range found {
				byPair[ports.Pair{StreamID: m.StreamID, Perspective: m.Perspective}] = m
			}
			out := make([]ports.StoredModel, len(pairs))
			for i, p := range pairs {
				out[i] = byPair[p] // zero (no StreamID) when missing
			}
			return out, nil
		}),
		saves: newCombiner(2, modelCombineLimit, timeout, func(ctx context.Context, saves []*ports.ModelSaveParams) ([]error, error) {
			return mb.ModelSaveMany(ctx, &ports.ModelSaveManyParams{Saves: saves})
		}),
	}
}

// load returns the stored model of k, or an error wrapping ports.ErrNotFound.
func (b *modelBatches) load(ctx context.Context, k pair.Key) (ports.StoredModel, error) {
	m, err := b.loads.do(ctx, ports.Pair{StreamID: k.Stream, Perspective: k.Perspective})
	if err != nil {
		return ports.StoredModel{}, fmt.Errorf("loading model %q of stream %s: %w", k.Perspective, k.Stream, err)
	}
	if m.StreamID != k.Stream {
		return ports.StoredModel{}, fmt.Errorf("loading model %q of stream %s: %w", k.Perspective, k.Stream, ports.ErrNotFound)
	}
	return m, nil
}

// save stores p as ModelSave would.
func (b *modelBatches) save(ctx context.Context, p *ports.ModelSaveParams) error {
	res, err := b.saves.do(ctx, p)
	if err != nil {
		return fmt.Errorf("saving model %q of stream %s: %w", p.Perspective, p.StreamID, err)
	}
	return res
}

// newTxSaves returns the combiner that groups the saves of table
// projections into ModelSaveTxMany calls (a lone save goes through
// ModelSaveTx, which needs no savepoint), or nil without the port.
//
// Every save it sends is shared: the saves grouped with it wait for its
// commit, and those queued behind its sender for the sender. So the writes
// of each save, all together, get patience on clock (see WithPatience),
// past which they are cut with ErrGroupPatience, whether the save went in
// a group or alone, and however many times it is sent.
//
// A write that broke the group's transaction (cut at the patience or at
// its deadline, which cancels a statement and so closes the connection, or
// the connection was lost under it) fails the whole call with its
// *WriteFailure: that save gets the error (wrapping ports.ErrTransient
// when the backend failed it, which charges no event), and the others are
// sent again at once without it, so that a slow write or a lost connection
// costs the saves grouped with it no more than its patience.
func newTxSaves(tx ports.TxModelStore, clock ports.Clock, patience, timeout time.Duration) *combiner[*ports.ModelSaveTxParams, error] {
	if tx == nil {
		return nil
	}
	return newCombiner(2, txSaveCombineLimit, timeout, func(ctx context.Context, sent []*ports.ModelSaveTxParams) ([]error, error) {
		saves := make([]*ports.ModelSaveTxParams, len(sent))
		for i, p := range sent {
			patient := *p // the caller's params stay as they are
			patient.Apply = WithPatience(p.Apply, patience, clock)
			saves[i] = &patient
		}
		res := make([]error, len(saves))
		left := make([]int, len(saves)) // indexes in saves not sent yet
		for i := range left {
			left[i] = i
		}
		for len(left) > 0 {
			if len(left) == 1 {
				res[left[0]] = tx.ModelSaveTx(ctx, saves[left[0]])
				return res, nil
			}
			group := make([]*ports.ModelSaveTxParams, len(left))
			for j, i := range left {
				group[j] = saves[i]
			}
			errs, err := tx.ModelSaveTxMany(ctx, &ports.ModelSaveTxManyParams{Saves: group})
			if err == nil {
				if len(errs) != len(group) {
					return nil, fmt.Errorf("backend returned %d results for %d saves", len(errs), len(group))
				}
				for j, i := range left {
					res[i] = errs[j]
				}
				return res, nil
			}
			var wf *WriteFailure
			j := -1
			if errors.As(err, &wf) {
				j = slices.IndexFunc(group, func(p *ports.ModelSaveTxParams) bool {
					return p.Save.StreamID == wf.Key.Stream && p.Save.Perspective == wf.Key.Perspective
				})
			}
			if j < 0 {
				return nil, err
			}
			res[left[j]] = err
			left = slices.Delete(left, j, j+1)
		}
		return res, nil
	})
}
