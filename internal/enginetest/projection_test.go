package enginetest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

func resetNothing(context.Context, ports.Tx, uuid.UUID) error { return nil }

func writeNothing(context.Context, ports.Tx, added) error { return nil }

// A table projection needs a backend with a ports.TxModelStore: on the
// memory adapter, New refuses it, and so does Start when it was added
// after New, with an error wrapping errors.ErrUnsupported that says why.
func TestProjectionNeedsTxModelStore(t *testing.T) {
	t.Parallel()

	t.Run("New", func(t *testing.T) {
		t.Parallel()
		reg := testRegistry(t)
		p := core.NewProjection("order_lines", resetNothing)
		core.MustHandleTx(p, writeNothing)
		require.NoError(t, reg.AddPerspective(p))
		opts := quietOptions(t)

		_, err := core.New(memory.New(memory.Options{}).Backend(), reg, &opts)
		require.ErrorIs(t, err, errors.ErrUnsupported)
		require.ErrorContains(t, err, `perspective "order_lines" is a table projection`)
	})

	t.Run("Start", func(t *testing.T) {
		t.Parallel()
		reg := testRegistry(t)
		opts := quietOptions(t)
		w, err := core.New(memory.New(memory.Options{}).Backend(), reg, &opts)
		require.NoError(t, err, "models alone run on the memory adapter")
		p := core.NewProjection("order_lines", resetNothing)
		core.MustHandleTx(p, writeNothing)
		require.NoError(t, reg.AddPerspective(p))

		require.ErrorIs(t, w.Start(t.Context()), errors.ErrUnsupported)
	})
}

// A table projection without a reset function or apply functions, or with
// one for an unregistered event type, is refused at registration.
func TestProjectionRegistration(t *testing.T) {
	t.Parallel()

	reg := testRegistry(t)
	noReset := core.NewProjection("no_reset", nil)
	core.MustHandleTx(noReset, writeNothing)
	require.ErrorContains(t, reg.AddPerspective(noReset), "no reset function")

	require.ErrorContains(t, reg.AddPerspective(core.NewProjection("no_apply", resetNothing)), "no apply functions")

	unknown := core.NewProjection("unknown", resetNothing)
	core.MustHandleTx(unknown, func(context.Context, ports.Tx, removed) error { return nil })
	require.ErrorIs(t, reg.AddPerspective(unknown), core.ErrUnknownEventType)

	dup := core.NewProjection("dup", resetNothing)
	core.MustHandleTx(dup, writeNothing)
	require.ErrorIs(t, core.HandleTx(dup, writeNothing), core.ErrDuplicate)
	require.Error(t, core.HandleTx[added](nil, writeNothing))
}
