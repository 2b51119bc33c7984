package cli_test

import (
	"encoding/json"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// The commands take every connection string pgx takes, several hosts
// included: they never listen for notifications, so nothing needs the one
// host a listener would.
func TestConnectionStrings(t *testing.T) {
	t.Parallel()

	d := migratedDB(t)
	u, err := url.Parse(d.url)
	require.NoError(t, err)
	// A host that refuses first: pgx tries the next.
	u.Host = "127.0.0.1:1," + u.Host
	multi := u.String()

	res := run(t, d.env, "--database", multi, "--schema", d.schema, "--json", "instances")
	require.Equal(t, 0, res.code, res.stderr)
	var got instancesJSON
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
	require.Empty(t, got.Instances)
}
