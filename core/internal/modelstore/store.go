// Package modelstore reads and writes the models of the drains and the
// rewinds: through a cache of the models this instance saved, in grouped
// calls when the backend batches model reads and writes, and, for table
// projections, in shared transactions whose writes are bounded (see
// WriteLimit and GroupPatience).
package modelstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/ports"
)

// Config is what a Store reads.
type Config struct {
	// Models stores the models; Batch, when set, groups their loads and
	// saves; Tx, when set, saves table projections.
	Models ports.ModelStore
	Batch  ports.ModelBatchStore
	Tx     ports.TxModelStore
	// CacheSize bounds the cache of saved models; 0 turns it off.
	CacheSize int
	Clock     ports.Clock
	// CallTimeout bounds each grouped call, sent under its first caller's
	// context detached from its cancellation.
	CallTimeout time.Duration
	// ApplyTimeout bounds each write of a table projection; the writes of
	// a shared save get GroupPatience(ApplyTimeout) all together.
	ApplyTimeout time.Duration
	// TxIdleTimeout is the ports.ModelSaveTxParams.IdleTimeout of the saves
	// of table projections that set none: how long a save's transaction
	// may idle before the backend may end it.
	TxIdleTimeout time.Duration
}

// New returns a Store.
func New(cfg Config) *Store {
	s := &Store{backend: cfg.Models, cache: newModelCache(cfg.CacheSize), batches: newModelBatches(cfg.Batch, cfg.CallTimeout), tx: cfg.Tx, txIdle: cfg.TxIdleTimeout}
	s.txSaves = newTxSaves(cfg.Tx, cfg.Clock, GroupPatience(cfg.ApplyTimeout), cfg.CallTimeout+cfg.ApplyTimeout)
	return s
}

// modelCache keeps the last model this instance saved per (stream,
// perspective), encoded, so the next drain of a pair it owns needs no load
// round trip. Stream affinity makes the cache almost always right; when it is
// not (another instance moved the pair, or replayed it in a rewind or a
// rebuild, which moves the pair's epoch), the cursor the fetch read is at
// another version or epoch and the entry is not used; should the pair move
// after the fetch, the save's version and epoch check fails, the entry is
// dropped and the next drain loads from the store. Entries are encoded
// bytes, never live model values, so a failed apply cannot corrupt them.
type modelCache struct {
	mu  sync.Mutex
	lru *simplelru.LRU[pair.Key, ports.StoredModel]
}

func newModelCache(size int) *modelCache {
	if size <= 0 {
		return nil
	}
	lru, err := simplelru.NewLRU[pair.Key, ports.StoredModel](size, nil)
	if err != nil {
		return nil
	}
	return &modelCache{lru: lru}
}

func (c *modelCache) get(k pair.Key) (ports.StoredModel, bool) {
	if c == nil {
		return ports.StoredModel{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Get(k)
}

func (c *modelCache) put(k pair.Key, m ports.StoredModel) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Add(k, m)
}

func (c *modelCache) drop(k pair.Key) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Remove(k)
}

// A Store reads and writes models for the drains and the rewinds: through
// the cache of models this instance saved, and in grouped calls when the
// backend batches model reads and writes.
type Store struct {
	backend ports.ModelStore
	cache   *modelCache
	batches *modelBatches                              // nil unless the model store batches
	tx      ports.TxModelStore                         // nil unless the backend runs table projections
	txSaves *combiner[*ports.ModelSaveTxParams, error] // groups tx's saves; nil with tx
	txIdle  time.Duration                              // IdleTimeout of tx's saves that set none
}

// Load returns the pair's model at position and epoch, those of the cursor
// the fetch read: from the cache when this instance saved it last, else
// from the store (ports.ErrNotFound when none), grouped with concurrent
// loads when the store implements ports.ModelBatchStore. A cached model at
// another position or epoch is stale (another instance moved the pair, or
// a rewind or a rebuild replaced its model, since) and is never handed to
// an apply.
func (s *Store) Load(ctx context.Context, k pair.Key, position, epoch int64) (ports.StoredModel, error) {
	if m, ok := s.cache.get(k); ok {
		if m.LastVersion == position && m.Epoch == epoch {
			return m, nil
		}
		s.cache.drop(k)
	}
	if s.batches != nil {
		return s.batches.load(ctx, k)
	}
	return s.backend.ModelLoad(ctx, &ports.ModelLoadParams{StreamID: k.Stream, Perspective: k.Perspective})
}

// Save saves a model with its cursor and keeps it in the cache; a failed
// save drops the cache entry. Concurrent saves go together in one call
// when the store implements ports.ModelBatchStore.
func (s *Store) Save(ctx context.Context, p *ports.ModelSaveParams) error {
	k := pair.Key{Stream: p.StreamID, Perspective: p.Perspective}
	save := s.backend.ModelSave
	if s.batches != nil {
		save = s.batches.save
	}
	if err := save(ctx, p); err != nil {
		s.cache.drop(k)
		return err
	}
	s.cache.put(k, ports.StoredModel{StreamID: p.StreamID, Perspective: p.Perspective, Data: p.Data, LastEventID: p.LastEventID, LastVersion: p.LastVersion, Epoch: p.Epoch()})
	return nil
}

// SaveTx saves a table projection's cursor and runs its writes in one
// transaction (ports.TxModelStore), keeping the position in the cache as
// Save does. Concurrent saves are shared: they go together in one
// transaction (ModelSaveTxMany), each in a savepoint of its own, and the
// writes of each get the patience of a shared save (see newTxSaves). A
// save alone is sent by its caller in a transaction of its own, its
// writes bounded by ApplyTimeout only. A save that sets no IdleTimeout
// gets Config.TxIdleTimeout.
func (s *Store) SaveTx(ctx context.Context, alone bool, p *ports.ModelSaveTxParams) error {
	k := pair.Key{Stream: p.Save.StreamID, Perspective: p.Save.Perspective}
	if p.IdleTimeout == 0 && s.txIdle > 0 {
		bounded := *p // the caller's params stay as they are
		bounded.IdleTimeout = s.txIdle
		p = &bounded
	}
	save := s.tx.ModelSaveTx
	if s.txSaves != nil && !alone {
		save = func(ctx context.Context, p *ports.ModelSaveTxParams) error {
			res, err := s.txSaves.do(ctx, p)
			if err != nil {
				return fmt.Errorf("saving projection %q of stream %s: %w", p.Save.Perspective, p.Save.StreamID, err)
			}
			return res
		}
	}
	if err := save(ctx, p); err != nil {
		s.cache.drop(k)
		return err
	}
	s.cache.put(k, ports.StoredModel{StreamID: p.Save.StreamID, Perspective: p.Save.Perspective, Data: p.Save.Data, LastEventID: p.Save.LastEventID, LastVersion: p.Save.LastVersion, Epoch: p.Save.Epoch()})
	return nil
}

// Forget drops the cached model of a pair (a rewind rebuilds it).
func (s *Store) Forget(k pair.Key) { s.cache.drop(k) }
