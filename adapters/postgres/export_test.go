package postgres

// Test-only access to the adapter's SQL, for the index-usage test.

import "github.com/vantage-go/vantage/ports"

// FindStatement returns the statement of a ModelsFind with params and
// its arguments.
func (s *Store) FindStatement(params *ports.ModelsFindParams) (string, []any, error) {
	if err := params.Validate(); err != nil {
		return "", nil, err
	}
	return s.findStatement(params)
}

// Render returns a query of the package with the Store's schema filled in.
func (s *Store) Render(text string) string { return s.sql(text) }

// Queries of the package, by name.
var Queries = map[string]string{
	"Claim":              sqlClaim,
	"HeartbeatLock":      sqlHeartbeatLock,
	"Heartbeat":          sqlHeartbeat,
	"AbandonLeases":      sqlAbandonLeases,
	"AbandonInstances":   sqlAbandonInstances,
	"DeregisterLeases":   sqlDeregisterLeases,
	"Deregister":         sqlDeregister,
	"RenewLeases":        sqlRenewLeases,
	"FetchLease":         sqlFetchLease,
	"FetchRows":          sqlFetchRows,
	"FetchCursors":       sqlFetchCursors,
	"ReadStream":         sqlReadStream,
	"CursorsGet":         sqlCursorsGet,
	"Finish":             sqlFinish,
	"FinishDebug":        sqlFinishDebug,
	"CompleteCursors":    sqlCompleteCursors,
	"FlagStragglers":     sqlFlagStragglers,
	"ReleaseDrained":     sqlReleaseDrained,
	"FailRows":           sqlFailRows,
	"FailFence":          sqlFailFence,
	"FailCursors":        sqlFailCursors,
	"FailEvents":         sqlFailEvents,
	"FlagFailedEvents":   sqlFlagFailedEvents,
	"Append":             sqlAppend,
	"AppendImplicit":     sqlAppendImplicit,
	"ModelLoad":          sqlModelLoad,
	"ModelLoadMany":      sqlModelLoadMany,
	"ModelSave":          sqlModelSave,
	"ModelSaveSet":       sqlModelSaveSet,
	"DeadLetterMove":     sqlDeadLetterMove,
	"DeadLetterRefused":  sqlDeadLetterRefused,
	"DeadLettersList":    sqlDeadLettersList,
	"DeadLettersNewest":  sqlDeadLettersListNewest,
	"DeadLetterRequeue":  sqlDeadLetterRequeue,
	"DeadLetterIgnore":   sqlDeadLetterIgnore,
	"DeadLetterGet":      sqlDeadLetterGet,
	"RequeueIDs":         sqlDeadLettersRequeueIDs,
	"RequeuePerspective": sqlDeadLettersRequeuePerspective,
	"DeadLettersRecover": sqlDeadLettersRecover,

	"CursorsRewindRequired": sqlCursorsRewindRequired,
	"StreamLockAcquire":     sqlStreamLockAcquire,
	"StreamLockRelease":     sqlStreamLockRelease,
	"StreamLocks":           sqlStreamLocks,
	"StreamsWithEventTypes": sqlStreamsWithEventTypes,
	"WorkLate":              sqlWorkLate,
	"SnapshotSave":          sqlSnapshotSave,
	"SnapshotLatestBefore":  sqlSnapshotLatestBefore,
	"SnapshotsDeleteFrom":   sqlSnapshotsDeleteFrom,
	"LifecycleClaim":        sqlLifecycleClaim,
	"LifecycleComplete":     sqlLifecycleComplete,
	"LifecycleStages":       sqlLifecycleStages,
	"LifecycleReady":        sqlLifecycleReady,
	"LifecycleOrphans":      sqlLifecycleOrphans,

	"SubscriptionsRegister": sqlSubscriptionsRegister,
	"Retire":                sqlRetire,
	"RetireRows":            sqlRetireRows,
	"PerspectiveRevive":     sqlPerspectiveRevive,
	"PerspectivesRetired":   sqlPerspectivesRetired,
	"PerspectivesLag":       sqlPerspectivesLag,
	"PerspectivesStatus":    sqlPerspectivesStatus,

	"RebuildRequest":  sqlRebuildRequest,
	"RebuildGet":      sqlRebuildGet,
	"RebuildsList":    sqlRebuildsList,
	"RebuildCancel":   sqlRebuildCancel,
	"RebuildClaim":    sqlRebuildClaim,
	"RebuildProgress": sqlRebuildProgress,
	"RebuildFinish":   sqlRebuildFinish,
}

// WorkSettings is the statement that opens every batch of work statements.
const WorkSettings = sqlWorkSettings

// SetSaveSetMin sets the fewest entries ModelSaveMany saves in one
// statement, for benchmarks comparing it with a statement per entry, and
// returns a function restoring it.
func SetSaveSetMin(n int) (restore func()) {
	old := saveSetMin
	saveSetMin = n
	return func() { saveSetMin = old }
}
