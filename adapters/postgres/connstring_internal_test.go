package postgres

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestListenerConnString(t *testing.T) {
	t.Parallel()

	for in, want := range map[string]string{
		"postgres://u:p@h:5432/db?pool_max_conns=4&sslmode=disable":                 "postgres://u:p@h:5432/db?sslmode=disable",
		"postgres://u@h/db?statement_cache_capacity=64&application_name=x":          "postgres://u@h/db?application_name=x&sslmode=prefer",
		"host=h port=5432 dbname=db pool_max_conns=4":                               "host=h port=5432 dbname=db sslmode=prefer",
		"host=h password='it''s' sslmode=require":                                   "",
		`host=h password='a b\'c' default_query_exec_mode=exec sslmode=verify-full`: `host=h password='a b\'c' sslmode=verify-full`,
	} {
		got, err := listenerConnString(in)
		if want == "" {
			// '' inside a quoted value ends it; the rest does not parse.
			require.Error(t, err, in)
			continue
		}
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	_, err := listenerConnString("")
	require.Error(t, err)
	_, err = listenerConnString("host")
	require.Error(t, err)
}

func TestNotifyChannel(t *testing.T) {
	t.Parallel()

	require.Equal(t, "vantage_vantage_work", notifyChannel("vantage"))
	long := notifyChannel("a_schema_name_long_enough_to_push_the_channel_past_63_bytes")
	require.LessOrEqual(t, len(long), 63)
	require.Regexp(t, `^vantage_work_[0-9a-f]{16}$`, long)
}
