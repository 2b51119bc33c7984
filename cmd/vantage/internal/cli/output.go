package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// report is the result of a command: one JSON document with --json, text
// otherwise. Its JSON field names are the documented, stable interface for
// scripts: add fields, never rename or remove one.
type report interface {
	writeText(w io.Writer)
}

// print writes r to stdout as --json asks.
func (a *app) print(r report) error {
	if !a.json {
		r.writeText(a.stdout)
		return nil
	}
	enc := json.NewEncoder(a.stdout)
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
