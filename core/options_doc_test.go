package core_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOptionsReference keeps the options reference honest: every exported
// field of Options, and every field of the option structs options.go
// declares for them, at any depth (Claims.LeaseDuration,
// Drain.Batcher.MaxWait, Retries.Flush.MaxAttempts, the Backoff fields of
// each retry), must be named in docs/options.md. A field of Options counts
// as named when it appears in a code span or in the first cell of a table
// row; a nested field, when it appears so in a row or paragraph that names
// every field on its path too, as in
// "`Drain.Batcher.SlidingWindow` / `MaxWait` / `MaxSize`". The option
// structs declared beside their services (SecurityOptions, HealthOptions,
// Hooks) are not checked here.
func TestOptionsReference(t *testing.T) {
	t.Parallel()

	structs := optionStructs(t)
	doc, err := os.ReadFile("../docs/options.md")
	require.NoError(t, err)

	for _, missing := range undocumentedOptions(structs, string(doc)) {
		t.Errorf("docs/options.md does not mention %s: add a row with its default and meaning", missing)
	}
}

// TestOptionsReferenceCatchesUndocumented checks the check: a reference
// that never names a grouped field, or that leaves one nested field out of
// a row, is reported.
func TestOptionsReferenceCatchesUndocumented(t *testing.T) {
	t.Parallel()

	structs := optionStructs(t)
	docBytes, err := os.ReadFile("../docs/options.md")
	require.NoError(t, err)
	doc := string(docBytes)
	require.Empty(t, undocumentedOptions(structs, doc))

	var kept []string
	for line := range strings.SplitSeq(doc, "\n") {
		if !strings.Contains(line, "LeaseDuration") {
			kept = append(kept, line)
		}
	}
	require.Equal(t, []string{"Options.Claims.LeaseDuration"}, undocumentedOptions(structs, strings.Join(kept, "\n")))

	withoutMaxSize := strings.Replace(doc, "`Drain.Batcher.SlidingWindow` / `MaxWait` / `MaxSize` |", "`Drain.Batcher.SlidingWindow` / `MaxWait` |", 1)
	require.NotEqual(t, doc, withoutMaxSize, "the reference has the row of Drain.Batcher")
	require.Equal(t, []string{"Options.Drain.Batcher.MaxSize"}, undocumentedOptions(structs, withoutMaxSize))
}

// optionStructs returns the struct types options.go declares, by name.
func optionStructs(t *testing.T) map[string]*ast.StructType {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), "options.go", nil, parser.SkipObjectResolution)
	require.NoError(t, err)
	structs := map[string]*ast.StructType{}
	ast.Inspect(file, func(n ast.Node) bool {
		if ts, ok := n.(*ast.TypeSpec); ok {
			if st, ok := ts.Type.(*ast.StructType); ok {
				structs[ts.Name.Name] = st
			}
		}
		return true
	})
	require.Contains(t, structs, "Options", "options.go declares Options")
	return structs
}

// undocumentedOptions returns the paths (Options.Drain.Batcher.MaxWait) of
// the fields of Options and of its option structs that doc does not name.
func undocumentedOptions(structs map[string]*ast.StructType, doc string) []string {
	units := referenceUnits(doc)
	var missing []string
	var walk func(path []string, st *ast.StructType)
	walk = func(path []string, st *ast.StructType) {
		for _, f := range exportedFields(structs, st) {
			p := append(slices.Clone(path), f.name)
			if !anyUnitNames(units, p...) {
				missing = append(missing, "Options."+strings.Join(p, "."))
				continue
			}
			if nested, ok := structs[typeName(f.typ)]; ok {
				walk(p, nested)
			}
		}
	}
	walk(nil, structs["Options"])
	return missing
}

type structField struct {
	name string
	typ  ast.Expr
}

// exportedFields returns the exported fields of st, with the fields of an
// embedded struct that structs declares in its place (they are promoted:
// Retries.Flush.Initial is set as such).
func exportedFields(structs map[string]*ast.StructType, st *ast.StructType) []structField {
	var fields []structField
	for _, f := range st.Fields.List {
		if len(f.Names) == 0 {
			if embedded, ok := structs[typeName(f.Type)]; ok {
				fields = append(fields, exportedFields(structs, embedded)...)
			}
			continue
		}
		for _, name := range f.Names {
			if name.IsExported() {
				fields = append(fields, structField{name: name.Name, typ: f.Type})
			}
		}
	}
	return fields
}

// typeName returns the name of a type declared in the same package, or "".
func typeName(expr ast.Expr) string {
	switch e := expr.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.StarExpr:
		return typeName(e.X)
	}
	return ""
}

var (
	codeSpan   = regexp.MustCompile("`[^`]+`")
	identifier = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
)

// referenceUnits splits the reference into table rows and paragraphs, each
// reduced to the set of identifiers it names: those of its code spans, and
// for a table row those of its first cell as well.
func referenceUnits(doc string) []map[string]bool {
	var units []map[string]bool
	add := func(text, firstCell string) {
		names := map[string]bool{}
		for _, span := range codeSpan.FindAllString(text, -1) {
			for _, id := range identifier.FindAllString(span, -1) {
				names[id] = true
			}
		}
		for _, id := range identifier.FindAllString(firstCell, -1) {
			names[id] = true
		}
		units = append(units, names)
	}
	var paragraph []string
	flush := func() {
		if len(paragraph) > 0 {
			add(strings.Join(paragraph, " "), "")
			paragraph = nil
		}
	}
	for line := range strings.SplitSeq(doc, "\n") {
		switch {
		case strings.HasPrefix(line, "|"):
			flush()
			cells := strings.Split(line, "|")
			add(line, cells[1])
		case strings.TrimSpace(line) == "":
			flush()
		default:
			paragraph = append(paragraph, line)
		}
	}
	flush()
	return units
}

// anyUnitNames reports whether one unit names every one of names.
func anyUnitNames(units []map[string]bool, names ...string) bool {
	for _, u := range units {
		all := true
		for _, n := range names {
			all = all && u[n]
		}
		if all {
			return true
		}
	}
	return false
}
