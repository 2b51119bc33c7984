package logtest_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/internal/logtest"
)

func TestUniqueKeys(t *testing.T) {
	t.Parallel()

	require.NoError(t, logtest.UniqueKeys([]byte(`{"a":1,"b":{"a":2},"c":[{"a":3},{"a":4}]}`)))
	require.ErrorContains(t, logtest.UniqueKeys([]byte(`{"a":1,"component":"x","component":"y"}`)), `"component"`)
	require.ErrorContains(t, logtest.UniqueKeys([]byte(`{"g":{"k":1,"k":2}}`)), `"k"`)
	require.ErrorContains(t, logtest.UniqueKeys([]byte(`{"l":[{"k":1,"k":2}]}`)), `"k"`)
	require.Error(t, logtest.UniqueKeys([]byte(`{"a":`)))
}
