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
// Now - StaleThreshold.
//
// Stream leases: work is leased per stream, never per row. A stream's lease
// names one holder instance and an expiry, and covers every pending row of
// the stream, whatever its perspective. A lease is live while its holder is
// live and its expiry is after Now. A stream under another instance's live
// lease is never claimed, fetched, completed or failed by the caller; a
// stream whose lease is not live (unleased, expired, or held by an instance
// that is not live) may be taken by a claim or a fetch. Claiming, fetching
// and renewing write the lease, not the work rows: a work row is written
// only when it is stored, fails, or is deleted (completed, dead-lettered,
// retired). The holder of a stream's lease, live or expired, is the only
// caller whose completions and failures of that stream's rows take effect,
// until another instance takes the stream (fencing): an instance that lost
// a stream can neither complete nor fail its rows, nor save their models
// (ModelStore: a rewind's or a rebuild's save is fenced by the model's
// epoch instead).
//
// Handed-out rows: a lease remembers, per perspective, the highest version
// that a fetch under it returned (EventsFetchPending): the pending rows of
// the pair at or below it were handed to the holder to apply. A failure of
// a row lowers its pair's mark below that row (the rows from it on are no
// longer being applied: the holder stops at a failure). The marks are
// cleared when the stream passes to another holder or is released.
//
// Passive instances: an instance whose latest heartbeat set
// InstanceHeartbeatParams.Passive is live like any other (nobody takes its
// live leases, it heartbeats and abandons stale instances, and is abandoned
// when it goes stale), but it takes no share of the streams nobody holds:
// the partition rule of WorkClaim counts and ranks only the live instances
// that are not passive, so the streams of every partition fall to an
// instance that claims them. A passive caller's WorkClaim leases it no
// stream it does not hold already; it still returns the streams it holds
// and can drain, as for any caller.
//
// Attempts: a work row's Attempts count the applies of it that failed
// (recorded by CursorStore.WorkFail) and the times it was handed out to an
// instance that died holding it: when a stream is taken from a holder that
// is not live, by the abandonment of that instance (InstanceHeartbeat) or
// by another instance's claim or fetch, every pending row handed out under
// that lease (at or below its pair's mark) gains one attempt. Nothing else
// counts: not a claim or a fetch (handing a row out writes nothing), not a
// lease that expired while its holder lives (the holder did not crash; an
// apply that overruns its deadline is charged through WorkFail), not a
// renewal, a deregistration or a backend error. A live instance that is
// slow, or whose database was briefly unreachable, costs its events
// nothing.
type WorkClaimer interface {
	// InstanceHeartbeat upserts the caller's instance row and refreshes its
	// heartbeat. Instances whose heartbeat is older than Now-StaleThreshold
	// are abandoned in the same call: their rows are deleted, every stream
	// lease they hold is released, one attempt more on each pending row
	// handed out under it (a takeover from a dead instance, see Attempts),
	// so others can claim the streams at once. It returns the abandoned
	// instance ids. The call never waits for the stale instance: a stream
	// it cannot take at once (a backend with row locks, where the stale
	// process stopped in the middle of a statement that locked the
	// stream) is left leased, and the instance recorded and stale, until
	// a later heartbeat takes it; the instance is abandoned, and returned,
	// by the call that releases its last stream.
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

	// InstanceDeregister releases every stream lease of the instance and
	// deletes its row (graceful shutdown). Deregistering an unknown
	// instance is a no-op. Its streams' rows gain no attempt. A claim or
	// fetch of the instance still running on the backend may lease streams
	// after it: call it once those returned.
	InstanceDeregister(ctx context.Context, params *InstanceDeregisterParams) error

	// WorkClaim leases streams to the caller and returns the streams it
	// should drain. Returns ErrInstanceNotAlive if the caller has no live
	// heartbeat, and then changes nothing.
	//
	// A stream is drainable when one of its perspectives' first pending row
	// is not scheduled in the future (a pair's rows are applied in version
	// order, so a row waiting for its retry time holds back the later rows
	// of its pair, and only those). A drainable stream is a candidate when
	// its lease names the caller (live or expired: nobody took it), or when
	// its lease is not live and the stream's partition modulo the count of
	// live instances that are not passive equals the caller's rank among
	// them ordered by id (a passive caller has no rank). Candidates are
	// taken oldest pending work first, within the MaxStreams bound below;
	// each is leased to the caller until Now + LeaseDuration, and one taken
	// from a holder that is not live charges the rows handed out under that
	// lease an attempt (see Attempts). A stream the caller holds under a
	// live lease is not written.
	//
	// The result lists every stream the caller can drain now (drainable and
	// under the caller's live lease), at most MaxStreams, smallest backlog
	// first (an adapter may count a backlog only up to a cap and order
	// those past it as equal); the same stream is returned on every call
	// until its rows complete (unless all its pairs wait for a retry time,
	// or the result is cut at MaxStreams). New streams are leased only
	// while the result stays within MaxStreams, so no lease ticks on a
	// stream nobody drains. HasMore is true when candidate streams were
	// left out or the result was cut at MaxStreams.
	WorkClaim(ctx context.Context, params *WorkClaimParams) (*WorkClaimResult, error)

	// WorkRenewLeases extends to Now+LeaseDuration the leases of the listed
	// streams that the caller holds, whether or not a lease expired
	// meanwhile (nobody took the stream); streams leased to another
	// instance, or released, are left alone (fenced). Attempts do not
	// change. It returns how many leases it renewed.
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
	// Passive declares an instance that claims no share of the streams
	// nobody holds (see WorkClaimer): it stays live but takes no rank in the
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
	// Live counts the live instances after this call, the caller included
	// (passive ones too): the caller and every other instance whose
	// heartbeat is newer than Now - StaleThreshold, on the clock of the
	// staleness check. Stale instances a rejoining caller left recorded do
	// not count.
	Live int
}

// PartitionCountDefault is the number of partitions stream ids hash into to
// spread the streams nobody holds over the live instances (see WorkClaim):
// the engine's default Options.Claims.PartitionCount, and what an adapter
// uses when WorkClaimParams.PartitionCount is not positive. Every instance
// sharing a backend must use the same count; a change re-buckets the
// streams nobody holds.
const PartitionCountDefault = 10_000

// WorkClaimParams are the inputs of WorkClaim.
type WorkClaimParams struct {
	InstanceID uuid.UUID
	MaxStreams int
	// PartitionCount is the number of partitions the streams nobody holds
	// are spread over; not positive selects PartitionCountDefault.
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
	InstanceID uuid.UUID
	// StreamIDs are the streams whose leases to renew.
	StreamIDs     []uuid.UUID
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

// Instance is a live engine instance as recorded by heartbeats.
type Instance struct {
	ID              uuid.UUID
	ServiceName     string
	HostName        string
	ProcessID       int
	Metadata        map[string]string
	StartedAt       time.Time
	LastHeartbeatAt time.Time
	// Passive is what the latest heartbeat declared (see
	// InstanceHeartbeatParams.Passive): the instance takes no share of the
	// streams nobody holds.
	Passive bool
	// LeasedStreams counts the streams whose lease names the instance,
	// expired or not (nobody took them since; see WorkClaimer): the streams
	// it holds. Set by Admin.InstancesList; zero elsewhere.
	LeasedStreams int
}
