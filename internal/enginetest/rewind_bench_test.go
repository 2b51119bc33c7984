package enginetest_test

import (
	"fmt"
	"testing"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/internal/enginebench"
)

// BenchmarkRewind10k measures a rewind of a 10,000-event stream triggered by
// one late event near its end, replayed from the start or from the latest
// snapshot before the trigger (see enginebench.Rewind).
func BenchmarkRewind10k(b *testing.B) {
	for _, every := range []int{0, 1000} {
		b.Run(fmt.Sprintf("snapshot_every=%d", every), func(b *testing.B) {
			enginebench.Rewind(b, memory.New(memory.Options{}).Backend(), 10_000, every)
		})
	}
}
