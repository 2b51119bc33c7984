package ports

import (
	"context"
	"log/slog"
	"slices"

	"github.com/google/uuid"
)

// Notifier carries wake-up hints. Notifications are best effort: polling is
// the correctness floor. Optional: without it the engine polls at
// Options.Drain.PollingInterval and claims at Options.Claims.Interval,
// never at their relaxed notify-healthy cadences.
type Notifier interface {
	// NotifierListen subscribes to wake signals. The returned channel has a
	// buffer of one and coalesces bursts (a wake sent while one is buffered
	// replaces it with their Merge); it is closed once ctx is done. The wake
	// of an append names the appended stream (Wake.Streams; the conformance
	// suite checks it): a sole engine instance then drains it without a
	// claim. A nil params is the zero NotifierListenParams.
	NotifierListen(ctx context.Context, params *NotifierListenParams) (<-chan Wake, error)
	// NotifierHealthy reports whether notifications are currently delivered
	// (the engine relaxes its poll cadence only while true).
	NotifierHealthy() bool
}

// Publisher is implemented by a Notifier that can wake every listener
// without an append: tests and tools use it, the engine never calls it.
// The conformance suite's notifier cases need it.
type Publisher interface {
	// NotifierPublish wakes every listener of this backend (service).
	NotifierPublish(ctx context.Context) error
}

// NotifierListenParams are the inputs of NotifierListen.
type NotifierListenParams struct {
	// Logger, when set, receives what the adapter logs about the delivery
	// of the subscription's wakes (a listener's connection lost and
	// regained, say) in place of the adapter's own logger, so that these
	// lines join the subscriber's, with its attributes. The adapter adds
	// its own "component" attribute, so Logger should carry none: a JSON
	// line holding a key twice loses one of the values. Defaults to the
	// adapter's logger.
	Logger *slog.Logger
}

// Wake is a notification that new work may be available.
type Wake struct {
	// Reconnected is true when the listener reconnected and notifications may
	// have been missed; the receiver should poll.
	Reconnected bool
	// Streams, when set, are the streams whose appends this wake reports,
	// and the wake reports nothing else: a receiver may drain them without
	// asking the backend which streams have work. Empty means unknown (a
	// NotifierPublish, a requeue, wakes merged past WakeStreamsMax): the
	// receiver should poll.
	Streams []uuid.UUID
}

// WakeStreamsMax bounds the Streams of a merged Wake; past it the merged
// wake names none, which asks for a poll.
const WakeStreamsMax = 256

// OfferWake hands w to a listener's channel of capacity one without
// blocking: when a wake is still buffered it is replaced by its Merge with
// w. The caller must be the channel's only sender (an adapter sends under
// one lock), so that once the buffered wake is taken back, or was received
// meanwhile, the send cannot block.
func OfferWake(ch chan Wake, w Wake) {
	select {
	case ch <- w:
		return
	default:
	}
	select {
	case buffered := <-ch:
		ch <- buffered.Merge(w)
	default:
		ch <- w
	}
}

// Merge returns the wake that reports what w and o report, for a listener
// that coalesces a wake into one still buffered: Reconnected when either
// is, and the streams of both, unless either names none (unknown stays
// unknown) or they would exceed WakeStreamsMax. It does not modify w or o.
func (w Wake) Merge(o Wake) Wake {
	m := Wake{Reconnected: w.Reconnected || o.Reconnected}
	if len(w.Streams) == 0 || len(o.Streams) == 0 || len(w.Streams)+len(o.Streams) > WakeStreamsMax {
		return m
	}
	m.Streams = make([]uuid.UUID, 0, len(w.Streams)+len(o.Streams))
	m.Streams = append(m.Streams, w.Streams...)
	for _, id := range o.Streams {
		if !slices.Contains(m.Streams, id) {
			m.Streams = append(m.Streams, id)
		}
	}
	return m
}
