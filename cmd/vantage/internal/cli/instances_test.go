package cli_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/cmd/vantage/internal/cli"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

// instancesJSON is the JSON of the instances command.
type instancesJSON struct {
	LiveWithinSeconds float64 `json:"live_within_seconds"`
	Instances         []struct {
		ID                  uuid.UUID         `json:"id"`
		Service             string            `json:"service"`
		Host                string            `json:"host"`
		PID                 int               `json:"pid"`
		StartedAt           *time.Time        `json:"started_at"`
		LastHeartbeatAt     *time.Time        `json:"last_heartbeat_at"`
		HeartbeatAgeSeconds float64           `json:"heartbeat_age_seconds"`
		Live                bool              `json:"live"`
		Passive             bool              `json:"passive"`
		LeasedStreams       int               `json:"leased_streams"`
		Metadata            map[string]string `json:"metadata"`
	} `json:"instances"`
}

func TestInstances(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) *db {
		t.Helper()
		d := migratedDB(t)
		b := d.backend(t)
		heartbeats(t, b)
		leaseStream(t, b, instanceIDs[0])
		d.env.Now = func() time.Time { return fixedNow }
		return d
	}

	t.Run("Table", func(t *testing.T) {
		t.Parallel()
		d := setup(t)
		res := d.run(t, "instances")
		require.Equal(t, cli.ExitOK, res.code)
		golden(t, "instances", res.stdout)

		res = d.run(t, "instances", "--live-within", "5m")
		require.Equal(t, cli.ExitOK, res.code)
		require.Contains(t, res.stdout, "3 instances, 3 live (heartbeat within 5m0s)")
	})
	t.Run("JSON", func(t *testing.T) {
		t.Parallel()
		d := setup(t)
		res := d.run(t, "instances", "--json")
		require.Equal(t, cli.ExitOK, res.code)
		var got instancesJSON
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
		require.Equal(t, 30.0, got.LiveWithinSeconds)
		require.Len(t, got.Instances, 3)
		first, billing := got.Instances[0], got.Instances[2]
		require.Equal(t, instanceIDs[0], first.ID)
		require.Equal(t, "orders", first.Service)
		require.Equal(t, "orders-7d9f-abc", first.Host)
		require.Equal(t, 101, first.PID)
		require.Equal(t, 2.0, first.HeartbeatAgeSeconds)
		require.True(t, first.Live)
		require.False(t, first.Passive)
		require.Equal(t, 1, first.LeasedStreams, "it holds one stream")
		require.Zero(t, billing.LeasedStreams)
		require.Equal(t, fixedNow.Add(-2*time.Second), *first.LastHeartbeatAt)
		require.NotNil(t, first.StartedAt)
		require.Equal(t, map[string]string{}, first.Metadata, "metadata is an object, empty when none")
		require.False(t, got.Instances[1].Live, "silent for 45s")
		require.True(t, billing.Passive)
		require.Equal(t, map[string]string{"version": "v42"}, billing.Metadata)
	})
	t.Run("AgesOnTheDatabaseClock", func(t *testing.T) {
		t.Parallel()
		d := migratedDB(t)
		id := uuid.New()
		_, err := d.backend(t).Claimer.InstanceHeartbeat(t.Context(), &ports.InstanceHeartbeatParams{InstanceID: id, StaleThreshold: time.Hour})
		require.NoError(t, err)
		res := d.run(t, "instances", "--json") // no Env.Now: the database's clock
		require.Equal(t, cli.ExitOK, res.code)
		var got instancesJSON
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
		require.Len(t, got.Instances, 1)
		require.Equal(t, id, got.Instances[0].ID)
		require.True(t, got.Instances[0].Live, "it just heartbeat")
		require.GreaterOrEqual(t, got.Instances[0].HeartbeatAgeSeconds, 0.0)
	})
	t.Run("Timeout", func(t *testing.T) {
		t.Parallel()
		d := migratedDB(t)
		// A transaction holding the instances table makes the listing wait
		// until --timeout gives up.
		tx, err := pgtest.Pool(t).Begin(t.Context())
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, tx.Rollback(context.WithoutCancel(t.Context()))) })
		_, err = tx.Exec(t.Context(), `LOCK TABLE `+d.schema+`.vantage_instances IN ACCESS EXCLUSIVE MODE`)
		require.NoError(t, err)

		res := d.run(t, "--timeout", "200ms", "instances")
		require.Equal(t, cli.ExitFailed, res.code)
		require.Contains(t, res.stderr, "the database did not answer within --timeout 200ms")
		require.Empty(t, res.stdout)
	})
	t.Run("None", func(t *testing.T) {
		t.Parallel()
		d := migratedDB(t)
		res := d.run(t, "instances")
		require.Equal(t, cli.ExitOK, res.code)
		require.Equal(t, "no instances\n", res.stdout)
		res = d.run(t, "instances", "--json")
		require.Equal(t, cli.ExitOK, res.code)
		require.JSONEq(t, `{"live_within_seconds": 30, "instances": []}`, res.stdout)
	})
}
