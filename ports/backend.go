package ports

import (
	"errors"
	"fmt"
)

// Backend bundles the ports one engine instance needs. Adapters return one
// from their Backend method. Claimer, Fetcher, Cursors, DeadLetters, Events
// and Models are required; Notifier, ModelBatch, ModelTx, ModelQuery,
// Lifecycle, Rewind, Snapshots, Admin, Stats and Rebuilds are optional: the
// engine degrades gracefully without them (see their docs and the package
// doc), except that table projections need ModelTx.
type Backend struct {
	Claimer     WorkClaimer
	Fetcher     EventFetcher
	Cursors     CursorStore
	Notifier    Notifier
	DeadLetters DeadLetterStore
	Events      EventStore
	Models      ModelStore
	ModelBatch  ModelBatchStore
	ModelTx     TxModelStore
	ModelQuery  ModelQuery
	Lifecycle   LifecycleStore
	Rewind      RewindStore
	Snapshots   SnapshotStore
	Admin       Admin
	Stats       Stats
	Rebuilds    RebuildQueue
}

// Validate reports, by name, every required port that is missing.
func (b Backend) Validate() error {
	var errs []error
	check := func(name string, missing bool) {
		if missing {
			errs = append(errs, fmt.Errorf("ports.Backend.%s is nil", name))
		}
	}
	check("Claimer", b.Claimer == nil)
	check("Fetcher", b.Fetcher == nil)
	check("Cursors", b.Cursors == nil)
	check("DeadLetters", b.DeadLetters == nil)
	check("Events", b.Events == nil)
	check("Models", b.Models == nil)
	return errors.Join(errs...)
}
