package postgres

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// The names of a fetch are interned: one string per distinct name, which
// never refers to the driver's memory it was read from.
func TestInternedNamesShareOneStringPerName(t *testing.T) {
	t.Parallel()

	names := internedNames{}
	buf := []byte("orders")
	first := names.intern(buf)
	copy(buf, "refund") // the driver reuses its buffer for the next row
	require.Equal(t, "orders", first, "the string does not alias the driver's memory")

	second := names.intern([]byte("orders"))
	require.Equal(t, unsafe.StringData(first), unsafe.StringData(second), "the same name is the same string")
	require.Equal(t, "refund", names.intern(buf))
	require.Empty(t, names.intern(nil), "a NULL name is empty")
	require.Len(t, names, 3)
}
