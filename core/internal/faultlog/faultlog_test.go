package faultlog_test

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core/internal/faultlog"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/internal/logtest"
	"github.com/vantage-go/vantage/ports"
)

func TestFaultLogTellsRepeatsOnce(t *testing.T) {
	t.Parallel()

	clock := clocktest.NewFake()
	recs := &logtest.Records{}
	f := faultlog.New(slog.New(recs), clock)
	ctx := t.Context()
	transient := fmt.Errorf("dial: connection refused: %w", ports.ErrTransient)

	f.OK(ctx, "claiming work") // nothing failed: nothing to tell
	for range 41 {             // a claim every 250ms for 10s
		f.Fail(ctx, "claiming work", transient)
		clock.Advance(250 * time.Millisecond)
	}
	f.Fail(ctx, "heartbeat", errors.New("permission denied"))
	f.OK(ctx, "claiming work")
	f.OK(ctx, "claiming work")

	require.Equal(t, []string{
		"WARN claiming work failed; retrying",
		"WARN claiming work still failing; retrying",
		"ERROR heartbeat failed; retrying",
		"INFO claiming work recovered",
	}, recs.Lines(), "one line for the first failure, one summary per interval, one for the recovery")
	require.Equal(t, int64(41), recs.Attr(1, "failures").Int64(), "the summary counts every failure so far")
	require.Equal(t, int64(40), recs.Attr(1, "since_last_log").Int64())
	require.Equal(t, int64(41), recs.Attr(3, "failures").Int64())
	require.Equal(t, 10250*time.Millisecond, recs.Attr(3, "failed_for").Duration())
}

func TestFaultLogRecurTellsOncePerInterval(t *testing.T) {
	t.Parallel()

	clock := clocktest.NewFake()
	recs := &logtest.Records{}
	f := faultlog.New(slog.New(recs), clock)
	ctx := t.Context()
	dropped := faultlog.Recurrence{Key: "drops", Every: 10 * time.Second, Level: slog.LevelError, Msg: "dropping batch", CountKey: "dropped_items", Op: "flushing completions"}
	transient := fmt.Errorf("connection refused: %w", ports.ErrTransient)

	f.Fail(ctx, "flushing completions", transient)
	for range 25 { // a batch of 3 dropped every second for 25s
		f.Recur(ctx, dropped, 3, slog.String("flusher", "completions"))
		clock.Advance(time.Second)
	}
	f.OK(ctx, "flushing completions")

	require.Equal(t, []string{
		"WARN flushing completions failed; retrying",
		"ERROR dropping batch",
		"ERROR dropping batch",
		"ERROR dropping batch",
		"ERROR dropping batch",
		"INFO flushing completions recovered",
	}, recs.Lines(), "the first drop, one line per 10s, and what was left untold when the operation recovered")
	for i, want := range map[int]struct{ items, occurrences int64 }{
		1: {3, 1},   // at 0s
		2: {30, 10}, // at 10s: the drops of 1s..10s
		3: {30, 10}, // at 20s
		4: {12, 4},  // at the recovery: 21s..24s
	} {
		require.Equal(t, want.items, recs.Attr(i, "dropped_items").Int64(), "line %d", i)
		require.Equal(t, want.occurrences, recs.Attr(i, "occurrences").Int64(), "line %d", i)
		require.Equal(t, "completions", recs.Attr(i, "flusher").String(), "line %d", i)
	}

	// A recovery tells nothing twice, and a recurrence of another
	// operation is not its to tell.
	f.Recur(ctx, faultlog.Recurrence{Key: "other", Every: time.Minute, Level: slog.LevelWarn, Msg: "skipping", CountKey: "events_skipped"}, 1)
	f.Recur(ctx, faultlog.Recurrence{Key: "other", Every: time.Minute, Level: slog.LevelWarn, Msg: "skipping", CountKey: "events_skipped"}, 1)
	f.Fail(ctx, "flushing completions", transient)
	f.OK(ctx, "flushing completions")
	require.Equal(t, []string{"WARN skipping", "WARN flushing completions failed; retrying", "INFO flushing completions recovered"}, recs.Lines()[6:])
}
