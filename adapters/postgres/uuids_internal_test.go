package postgres

import (
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"
)

// TestUUIDsArgEncodesLikeUUIDs checks that uuidsArg changes how pgx gets
// to the bytes of a uuid[] parameter, not the bytes: the same binary array
// as the []uuid.UUID it replaces, and NULL for nil.
func TestUUIDsArgEncodesLikeUUIDs(t *testing.T) {
	m := pgtype.NewMap()
	encode := func(v any) []byte {
		t.Helper()
		buf, err := m.Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, v, nil)
		require.NoError(t, err)
		return buf
	}
	ids := []uuid.UUID{uuid.New(), uuid.Nil, uuid.New()}

	require.Equal(t, encode(ids), encode(uuidsArg(ids)))
	require.Equal(t, encode([]uuid.UUID{}), encode(uuidsArg([]uuid.UUID{})), "empty array")
	require.Nil(t, uuidsArg(nil))
	require.Nil(t, encode(uuidsArg(nil)), "NULL")
}

// BenchmarkUUIDArray encodes a uuid[] parameter of 1,000 ids, as given to
// pgx before and after uuidsArg.
func BenchmarkUUIDArray(b *testing.B) {
	ids := make([]uuid.UUID, 1000)
	for i := range ids {
		ids[i] = uuid.New()
	}
	m := pgtype.NewMap()
	for _, bc := range []struct {
		name string
		arg  func() any
	}{
		{"UUIDs", func() any { return ids }},
		{"UUIDsArg", func() any { return uuidsArg(ids) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				var err error
				if buf, err = m.Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, bc.arg(), buf[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestUUIDDestScansUUIDs checks that a uuid scanned through uuidDest is the
// uuid encoded.
func TestUUIDDestScansUUIDs(t *testing.T) {
	m := pgtype.NewMap()
	id := uuid.New()
	buf, err := m.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, uuidsArg([]uuid.UUID{id})[0], nil)
	require.NoError(t, err)
	var got uuid.UUID
	require.NoError(t, m.Scan(pgtype.UUIDOID, pgtype.BinaryFormatCode, buf, uuidDest(&got)))
	require.Equal(t, id, got)
}
