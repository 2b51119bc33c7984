package core

import "github.com/vantage-go/vantage/ports"

// idleBackend satisfies every port with nil embedded interfaces, for tests
// that build a Worker but never let it reach the backend (any call panics).
type idleBackend struct {
	ports.WorkClaimer
	ports.EventFetcher
	ports.CursorStore
	ports.Notifier
	ports.DeadLetterStore
	ports.EventStore
	ports.ModelStore
}

func newIdleBackend() ports.Backend {
	b := idleBackend{}
	return ports.Backend{Claimer: b, Fetcher: b, Cursors: b, Notifier: b, DeadLetters: b, Events: b, Models: b}
}
