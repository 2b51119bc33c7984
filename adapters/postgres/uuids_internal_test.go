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

// TestUUIDArgsEncodeAsText checks that uuid parameters encode the way pgx
// sends them under QueryExecModeExec and QueryExecModeSimpleProtocol: as
// text, planned by their Go type alone (OID 0), which a bare [16]byte
// cannot be.
func TestUUIDArgsEncodeAsText(t *testing.T) {
	m := pgtype.NewMap()
	encode := func(v any) []byte {
		t.Helper()
		buf, err := m.Encode(0, pgtype.TextFormatCode, v, nil)
		require.NoError(t, err)
		return buf
	}
	a, b := uuid.New(), uuid.New()
	require.Equal(t, a.String(), string(encode(uuidArg(a))))
	require.Nil(t, encode(uuidArg(uuid.Nil)), "a nil id is NULL")
	require.Equal(t, "{"+a.String()+","+uuid.Nil.String()+","+b.String()+"}", string(encode(uuidsArg([]uuid.UUID{a, uuid.Nil, b}))))
	require.Nil(t, encode(uuidsArg(nil)), "NULL")

	_, err := m.Encode(0, pgtype.TextFormatCode, [16]byte(a), nil)
	require.Error(t, err, "the form the adapter passed before")
}

// TestJSONMapIsText checks that jsonMap's value reaches a jsonb parameter
// as JSON text in every exec mode: a []byte would be sent as bytea there.
func TestJSONMapIsText(t *testing.T) {
	m := pgtype.NewMap()
	check := func(in map[string]string, want string) {
		t.Helper()
		js, err := jsonMap(in)
		require.NoError(t, err)
		buf, err := m.Encode(0, pgtype.TextFormatCode, js, nil)
		require.NoError(t, err)
		require.JSONEq(t, want, string(buf))
	}
	check(nil, `{}`)
	check(map[string]string{"host": "a"}, `{"host":"a"}`)
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
