//go:build !unix

package faults

import "os"

// freezeSignal and thawSignal have no portable equivalent off Unix: the
// pause scenario fails its step there.
var freezeSignal, thawSignal os.Signal
