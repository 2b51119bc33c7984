package ports

import (
	"cmp"
	"context"
	"time"

	"github.com/google/uuid"
)

// WorkClaimer coordinates instances: heartbeats, stale-instance abandonment,
// claiming work per stream, lease renewal and graceful deregistration.
//
// Liveness: an instance is live while its last heartbeat is newer than
// Now - StaleThreshold. Stream affinity: a stream is pinned to at most one
// live instance at a time; claims never take a stream pinned to a live other.
//
// Passive instances: an instance whose latest heartbeat set
// InstanceHeartbeatParams.Passive is live like any other (nobody takes its
// pinned streams or its live leases, it heartbeats and abandons stale
// instances, and is abandoned when it goes stale), but it takes no share of
// the unpinned streams: the partition rule of WorkClaim counts and ranks
// only the live instances that are not passive, so the streams of every
// partition fall to an instance that claims them. A passive caller's
// WorkClaim leases it no unpinned stream and none pinned to a dead
// instance; it still leases the candidate rows of the streams pinned to it
// and returns the streams it can drain, as for any caller.
//
// Attempts: a work row's Attempts count the applies of it that failed
// (recorded by CursorStore.WorkFail) and the times it was taken over from a
// dead instance: released by the abandonment of its holder, or leased from
// another instance's expired lease. Leasing an unleased row, re-leasing the
// caller's own rows (its lease expired or not) and renewing leases never
// count, so a live instance that is slow, or whose database was briefly
// unreachable, costs its events nothing.
type WorkClaimer interface {
	// InstanceHeartbeat upserts the caller's instance row and refreshes its
	// heartbeat. Instances whose heartbeat is older than Now-StaleThreshold
	// are abandoned in the same call: their rows are deleted, every lease
	// they hold is released (one attempt more on each released row: a
	// takeover from a dead instance) and their stream pins are cleared, so
	// others can claim the work at once. It returns the abandoned instance
	// ids.
	//
	// Only a caller that was live itself before the call abandons others:
	// one whose previous heartbeat is newer than Now-StaleThreshold. A new
	// instance, or one returning from an outage that silenced every
	// instance (the database was unreachable for longer than the
	// threshold), first re-registers (Rejoined is set and nothing is
	// abandoned), so that peers silenced by the same outage get a heartbeat
	// interval to re-register too, instead of being abandoned with all
	// their work.
	//
	// In the same call it reports NextStaleAt, when the next other instance
	// goes stale if it never heartbeats again: the earliest LastHeartbeatAt +
	// StaleThreshold among the other instances the call left recorded (the
	// live ones, and any whose heartbeat is exactly Now - StaleThreshold: no
	// longer live, not yet abandoned), zero when there is none. Instances a
	// rejoining caller left stale do not count: their deadline passed, and a
	// heartbeat aimed at it would abandon the peers the rejoin waits for.
	// The caller's own heartbeat never counts. It is on the clock of the
	// staleness check (Now when set, else the backend's own), so a
	// heartbeat with a Now after NextStaleAt abandons that instance unless
	// it heartbeats first; callers use it to heartbeat as soon as a peer
	// goes stale rather than at their next interval.
	//
	// Idempotent; safe to call concurrently from many instances, which then
	// abandon a stale instance once between them, without deadlocking
	// whatever the number of survivors.
	InstanceHeartbeat(ctx context.Context, params *InstanceHeartbeatParams) (*InstanceHeartbeatResult, error)

	// InstanceDeregister releases every lease and stream pin of the instance
	// and deletes its row (graceful shutdown). Deregistering an unknown
	// instance is a no-op. The released rows gain no attempt. A claim or
	// fetch of the instance still running on the backend may lease rows
	// after it: call it once those returned.
	InstanceDeregister(ctx context.Context, params *InstanceDeregisterParams) error

	// WorkClaim leases work to the caller and returns the streams it should
	// drain. Returns ErrInstanceNotAlive if the caller has no live heartbeat.
	//
	// A pending row is a candidate when it is unleased or its lease expired,
	// it is not scheduled in the future, its stream is pinned to the caller
	// or (unpinned, or pinned to a dead instance, and the stream's partition
	// modulo the count of live instances that are not passive equals the
	// caller's rank among them ordered by id; a passive caller has no rank),
	// and no earlier row (lower version) of the same (stream, perspective)
	// is under another holder's live lease or scheduled in the future (the
	// ordering guard). Candidate streams are selected within the MaxStreams
	// bound below, every candidate row of a selected stream is leased to the
	// caller, and the stream is pinned to the caller. Streams come back
	// smallest backlog first (an adapter may count a backlog only up to a
	// cap and order those past it as equal). A row leased from another
	// instance's expired lease gains an attempt; no other row does (see
	// Attempts above).
	//
	// The result lists every stream the caller can drain now (some
	// perspective's first pending row is under the caller's live lease), at
	// most MaxStreams; the same stream is returned on every call until its
	// rows complete (unless its first rows wait behind a row scheduled in
	// the future, or the result is cut at MaxStreams). New streams are
	// leased only while the result stays
	// within MaxStreams, so no lease ticks on a stream nobody drains.
	// HasMore is true when candidate streams were left out or the result was
	// cut at MaxStreams.
	WorkClaim(ctx context.Context, params *WorkClaimParams) (*WorkClaimResult, error)

	// WorkRenewLeases extends the leases of the listed rows that are pending
	// and still held by the caller (fenced) to Now+LeaseDuration, whether or
	// not their lease expired meanwhile (nobody took them over); attempts do
	// not change. It returns how many it renewed.
	WorkRenewLeases(ctx context.Context, params *WorkRenewLeasesParams) (int, error)
}

// InstanceHeartbeatParams are the inputs of InstanceHeartbeat.
type InstanceHeartbeatParams struct {
	InstanceID     uuid.UUID
	ServiceName    string
	HostName       string
	ProcessID      int
	Metadata       map[string]string
	StaleThreshold time.Duration
	Now            time.Time
	// Passive declares an instance that claims no share of the unpinned
	// streams (see WorkClaimer): it stays live but takes no rank in the
	// partition rule. The latest heartbeat's value is the instance's; false,
	// the zero value, claims as any instance.
	Passive bool
}

// InstanceDeregisterParams are the inputs of InstanceDeregister.
type InstanceDeregisterParams struct {
	InstanceID uuid.UUID
}

// InstanceHeartbeatResult is the output of InstanceHeartbeat.
type InstanceHeartbeatResult struct {
	// Abandoned lists the stale instances removed by this call.
	Abandoned []uuid.UUID
	// Rejoined is true when the caller was not live before this call (a new
	// instance, or one whose previous heartbeat had gone stale), so the
	// call abandoned nobody.
	Rejoined bool
	// NextStaleAt is when the next of the other remaining instances becomes
	// stale if it never heartbeats again: the earliest LastHeartbeatAt +
	// StaleThreshold among them, on the clock of the staleness check. Zero
	// when no other instance remains.
	NextStaleAt time.Time
}

// PartitionCountDefault is the number of partitions stream ids hash into
// to spread orphaned streams over the live instances (see WorkClaim): the
// engine's default Options.PartitionCount, and what an adapter uses when
// WorkClaimParams.PartitionCount is not positive. Every instance sharing a
// backend must use the same count; a change re-buckets the unpinned
// streams.
const PartitionCountDefault = 10_000

// WorkClaimParams are the inputs of WorkClaim.
type WorkClaimParams struct {
	InstanceID uuid.UUID
	MaxStreams int
	// PartitionCount is the number of partitions orphaned streams are
	// spread over; not positive selects PartitionCountDefault.
	PartitionCount int
	LeaseDuration  time.Duration
	StaleThreshold time.Duration
	Now            time.Time
}

// WorkClaimResult is the output of WorkClaim.
type WorkClaimResult struct {
	StreamIDs []uuid.UUID
	HasMore   bool
}

// WorkRenewLeasesParams are the inputs of WorkRenewLeases.
type WorkRenewLeasesParams struct {
	InstanceID    uuid.UUID
	WorkIDs       []uuid.UUID
	LeaseDuration time.Duration
	Now           time.Time
}

// Validate reports the first field every WorkClaimer rejects with
// ErrInvalidArgument: a nil InstanceID or a StaleThreshold that is not
// positive. Adapters call it before they change anything.
func (p *InstanceHeartbeatParams) Validate() error {
	return cmp.Or(
		checkID("InstanceHeartbeatParams.InstanceID", p.InstanceID),
		checkPositive("InstanceHeartbeatParams.StaleThreshold", p.StaleThreshold),
	)
}

// Validate reports the first field every WorkClaimer rejects with
// ErrInvalidArgument: a nil InstanceID, or a MaxStreams, LeaseDuration or
// StaleThreshold that is not positive.
func (p *WorkClaimParams) Validate() error {
	return cmp.Or(
		checkID("WorkClaimParams.InstanceID", p.InstanceID),
		checkPositive("WorkClaimParams.MaxStreams", p.MaxStreams),
		checkPositive("WorkClaimParams.LeaseDuration", p.LeaseDuration),
		checkPositive("WorkClaimParams.StaleThreshold", p.StaleThreshold),
	)
}

// Validate reports the field every WorkClaimer rejects with
// ErrInvalidArgument: a LeaseDuration that is not positive.
func (p *WorkRenewLeasesParams) Validate() error {
	return checkPositive("WorkRenewLeasesParams.LeaseDuration", p.LeaseDuration)
}
