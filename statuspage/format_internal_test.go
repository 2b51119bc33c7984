package statuspage

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

func TestAge(t *testing.T) {
	t.Parallel()

	for d, want := range map[time.Duration]string{
		0:                                     "0s",
		-time.Minute:                          "0s",
		300 * time.Millisecond:                "<1s",
		time.Second:                           "1s",
		59*time.Second + 999*time.Millisecond: "59s",
		time.Minute:                           "1m",
		3*time.Minute + 7*time.Second:         "3m 7s",
		2 * time.Hour:                         "2h",
		2*time.Hour + 5*time.Minute + 59*time.Second: "2h 5m",
		3*24*time.Hour + 4*time.Hour + time.Minute:   "3d 4h",
		400 * 24 * time.Hour:                         "400d",
	} {
		require.Equal(t, want, age(d), "age(%s)", d)
	}
}

func TestWhenOf(t *testing.T) {
	t.Parallel()

	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	require.Equal(t, when{Rel: "12s ago", Abs: "2026-03-01T11:59:48Z"}, whenOf(now, now.Add(-12*time.Second)))
	require.Equal(t, when{Rel: "in 2m", Abs: "2026-03-01T12:02:00Z"}, whenOf(now, now.Add(2*time.Minute)))
	require.Equal(t, when{Rel: "just now", Abs: "2026-03-01T11:59:59Z"}, whenOf(now, now.Add(-500*time.Millisecond)), "to the second, truncated")
	require.Equal(t, when{Rel: "–"}, whenOf(now, time.Time{}), "a time that never happened")
	paris := time.FixedZone("CET", 3600)
	require.Equal(t, "2026-03-01T11:00:00Z", whenOf(now, now.Add(-time.Hour).In(paris)).Abs, "absolute times in UTC")
}

func TestCount(t *testing.T) {
	t.Parallel()

	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1204000: "1,204,000", -12345: "-12,345"} {
		require.Equal(t, want, count(n))
	}
	require.Equal(t, "1 event", pluralOf(1, "event"))
	require.Equal(t, "0 events", pluralOf(0, "event"))
	require.Equal(t, "1,204 events", pluralOf(1204, "event"))
}

func TestShortID(t *testing.T) {
	t.Parallel()

	require.Equal(t, "…0e74b2e3", shortID(uuid.MustParse("01a23ac1-ce31-78d4-956f-0e740e74b2e3")), "the end: UUIDv7s begin alike")
	require.Equal(t, "–", shortID(uuid.Nil))
}

func TestFirstLine(t *testing.T) {
	t.Parallel()

	require.Equal(t, "dial tcp: i/o timeout …", firstLine("dial tcp:\ti/o  timeout\ngoroutine 1"))
	long := firstLine(strings.Repeat("x", 300))
	require.Len(t, []rune(long), errorLineMax)
	require.Equal(t, "…", string([]rune(long)[errorLineMax-1:]))
}

func TestCursorRoundTrip(t *testing.T) {
	t.Parallel()

	c := ports.DeadLetterCursor{DeadLetteredAt: time.Date(2026, 3, 1, 11, 58, 2, 123456789, time.UTC), ID: uuid.MustParse("0197a3d0-77e1-7c2a-9f10-5e0b2d1c4a11")}
	got, err := parseCursor(formatCursor(c))
	require.NoError(t, err)
	require.Equal(t, c, got, "to the nanosecond")
	empty, err := parseCursor("")
	require.NoError(t, err)
	require.Equal(t, ports.DeadLetterCursor{}, empty, "the first page")
	for _, bad := range []string{"yesterday", "2026-03-01T11:58:02Z", "2026-03-01_0197a3d0-77e1-7c2a-9f10-5e0b2d1c4a11", "2026-03-01T11:58:02Z_42"} {
		_, err := parseCursor(bad)
		require.Error(t, err, bad)
	}
}
