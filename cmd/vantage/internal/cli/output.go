package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// report is the result of a command: one JSON document with --json, text
// otherwise. Its JSON field names are the documented, stable interface for
// scripts: add fields, never rename or remove one.
type report interface {
	writeText(w io.Writer)
}

// print writes r to stdout as --json asks.
func (a *app) print(r report) error {
	return a.render(a.stdout, r)
}

// render writes r to w as --json asks.
func (a *app) render(w io.Writer, r report) error {
	if !a.json {
		r.writeText(w)
		return nil
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}

// writeTable writes rows under header, in columns two spaces apart. Cells
// must not hold tabs or newlines (see cell).
func writeTable(w io.Writer, header []string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	_ = tw.Flush() // the writes went to w; nothing to do if it fails
}

// cellWidthMax bounds the free-text cells of a table (errors).
const cellWidthMax = 60

// cell makes free text fit in a table cell: one line, tabs as spaces, at
// most cellWidthMax runes, cut with an ellipsis. --json has the full text.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > cellWidthMax {
		return string(r[:cellWidthMax-1]) + "…"
	}
	if s == "" {
		return "-"
	}
	return s
}

// timeText is how tables show a time: UTC, to the second.
func timeText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// jsonTime is how JSON shows a time: UTC RFC 3339 with fractions, null
// when unset.
func jsonTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// ageText shows a duration compactly, to the second: 45s, 3m07s, 2h05m,
// 3d04h. Negative ages (a clock ahead of the one that measures) show as 0s.
func ageText(d time.Duration) string {
	d = max(d, 0).Truncate(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// plural returns "n noun" or "n nouns".
func plural(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
