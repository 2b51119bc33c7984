package enginetest_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
)

// recordHandler sends every log record's message and attributes to a
// channel.
type recordHandler struct{ records chan<- slog.Record }

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.records <- r.Clone()
	return nil
}
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordHandler) WithGroup(string) slog.Handler      { return h }

// TestPanickingReceptorsAreLoggedErrors registers an inline and a detached
// receptor that panic: each panic is logged as the receptor's error, as a
// returned error would be, and the worker goes on applying events (a panic
// in a detached receptor's goroutine would otherwise end the process).
func TestPanickingReceptorsAreLoggedErrors(t *testing.T) {
	t.Parallel()

	for _, mode := range []core.Mode{core.Inline, core.Detached} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			b := memory.New(memory.Options{}).Backend()
			records := make(chan slog.Record, 100)
			opts := quietOptions(t)
			opts.Logger = slog.New(recordHandler{records})
			processed := reportProcessed(&opts, 10)
			reg := testRegistry(t)
			require.NoError(t, core.AddReceptor(reg, core.PostPerspective, mode, func(context.Context, added, core.StageInfo) error {
				panic("receptor bug")
			}))
			startWorker(t, b, reg, opts)

			first, second := uuid.New(), uuid.New()
			appendAdded(t, reg, b, first, 1)
			require.Equal(t, first, waitFor(t, processed, "the first event applied").StreamID)
			for {
				r := waitFor(t, records, "the receptor's panic logged")
				var logged string
				r.Attrs(func(a slog.Attr) bool {
					if a.Key == "error" {
						logged = a.Value.String()
					}
					return true
				})
				if logged != "" {
					require.Contains(t, r.Message, "receptor failed")
					require.Contains(t, logged, "receptor panicked: receptor bug")
					break
				}
			}
			appendAdded(t, reg, b, second, 2)
			require.Equal(t, second, waitFor(t, processed, "the next event applied").StreamID)
			require.Equal(t, 2, loadTotal(t, b, second).Sum)
		})
	}
}
