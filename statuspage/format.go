package statuspage

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// when is a time as the pages show it: relative to the page's time, with
// the absolute time for the title attribute and the datetime of <time>.
type when struct {
	// Rel is "12s ago", "in 3m" or "just now"; "–" for a zero time.
	Rel string
	// Abs is the time in UTC, RFC 3339, to the second; "" for a zero time.
	Abs string
}

// whenOf returns t as seen at now.
func whenOf(now, t time.Time) when {
	if t.IsZero() {
		return when{Rel: "–"}
	}
	w := when{Abs: t.UTC().Format(time.RFC3339)}
	switch d := now.Sub(t); {
	case d >= time.Second:
		w.Rel = age(d) + " ago"
	case d <= -time.Second:
		w.Rel = "in " + age(-d)
	default:
		w.Rel = "just now"
	}
	return w
}

// age shows a duration in its two largest units, to the second: 45s,
// 3m 7s, 2h 5m, 3d 4h; a unit that is zero is left out (3m, 2h). Below a
// second it is "<1s" (zero is "0s").
func age(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return "<1s"
	}
	s := int64(d / time.Second)
	two := func(a int64, ua string, b int64, ub string) string {
		if b == 0 {
			return strconv.FormatInt(a, 10) + ua
		}
		return fmt.Sprintf("%d%s %d%s", a, ua, b, ub)
	}
	switch {
	case s < 60:
		return strconv.FormatInt(s, 10) + "s"
	case s < 3600:
		return two(s/60, "m", s%60, "s")
	case s < 86400:
		return two(s/3600, "h", s%3600/60, "m")
	}
	return two(s/86400, "d", s%86400/3600, "h")
}

// count shows n with thousands separated by commas: 1,204,000.
func count(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// shortID is the end of an id, enough to tell ids apart on a page; the
// full id goes in the title attribute or the detail page. Not its start:
// the ids are UUIDv7, whose first digits are the time they were made, the
// same for ids made within a minute.
func shortID(id uuid.UUID) string {
	if id == uuid.Nil {
		return "–"
	}
	s := id.String()
	return "…" + s[len(s)-8:]
}

// pluralOf returns n, with thousands separated, and noun, with an s
// unless n is 1: "1 event", "1,204 events".
func pluralOf(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return count(n) + " " + noun + "s"
}

// clockText is how the header shows the page's time.
func clockText(t time.Time) string {
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// errorLineMax bounds the error shown in a list row.
const errorLineMax = 120

// firstLine makes free text fit in a table cell: its first line, its
// spaces collapsed, at most errorLineMax runes, cut with an ellipsis.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > errorLineMax {
		return string(r[:errorLineMax-1]) + "…"
	}
	return s
}
