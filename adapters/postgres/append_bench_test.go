package postgres_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

// BenchmarkAppend appends one event at a time, as live traffic does, to
// 1,000 streams whose events fan out to two perspectives, on a pool of one
// connection. Besides the time per append it reports db-µs/op, the CPU the
// database server's process spent per append, when that process runs on
// this machine (read from /proc): with the round trip gone from the
// figure, it is what an append costs the database.
func BenchmarkAppend(b *testing.B) {
	ctx := context.Background()
	pool := pgtest.NewPoolWith(b, pgtest.PoolOptions{MaxConns: 1})
	store, err := postgres.New(pool, postgres.Options{Schema: pgtest.Schema(b), PollOnly: true})
	require.NoError(b, err)
	b.Cleanup(func() { _ = store.Close() })
	es := store.Backend().Events
	subs := []ports.Subscription{{EventType: "incremented", Perspective: "counter"}, {EventType: "incremented", Perspective: "totals"}}
	streams := make([]uuid.UUID, 1000)
	for i := range streams {
		streams[i] = uuid.Must(uuid.NewV7())
	}
	appendTo := func(i int) {
		_, err := es.EventsAppend(ctx, &ports.EventsAppendParams{
			StreamID:      streams[i%len(streams)],
			Events:        []ports.NewEvent{{Type: "incremented", Data: []byte(fmt.Sprintf(`{"by":%d}`, i))}},
			Subscriptions: subs,
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	// Every stream gets its first event before the timing: the steady state
	// appends to streams that have some.
	for i := range streams {
		appendTo(i)
	}
	var pid int
	require.NoError(b, pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	before, readable := backendCPU(pid)
	b.ResetTimer()
	for i := range b.N {
		appendTo(i)
	}
	b.StopTimer()
	if after, ok := backendCPU(pid); readable && ok {
		b.ReportMetric(float64(after-before)/float64(time.Microsecond)/float64(b.N), "db-µs/op")
	}
}

// backendCPU returns the CPU time (user and system) of process pid, read
// from /proc/<pid>/stat in clock ticks of 10ms; false when it cannot be
// read, as when the database runs on another machine.
func backendCPU(pid int) (time.Duration, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command name is in parentheses and may hold spaces: split after it.
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, false
	}
	// fields[0] is the stat's third field (state); utime and stime are its
	// 14th and 15th.
	user, err1 := strconv.ParseInt(fields[11], 10, 64)
	sys, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(user+sys) * 10 * time.Millisecond, true
}
