package startstop

// StopsWaiting returns the number of Stops of l waiting for its Start.
func StopsWaiting(l *List) int32 { return l.stopping.Load() }
