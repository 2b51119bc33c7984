package failure

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core/internal/modelstore"
	"github.com/vantage-go/vantage/core/internal/monitor"
	"github.com/vantage-go/vantage/core/internal/perspective"
	"github.com/vantage-go/vantage/ports"
)

func TestFailureReason(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		err  error
		want string
	}{
		{errors.New("boom"), ports.ReasonFailed},
		{fmt.Errorf("%w of 1m0s", monitor.ErrDeadline), ports.ReasonTimedOut},
		{fmt.Errorf("wrapped: %w", monitor.ErrAbandoned), ports.ReasonTimedOut},
		{fmt.Errorf("%w: decoding x", perspective.ErrUndecodable), ports.ReasonUndecodable},
		{fmt.Errorf("%w: \"x\"", perspective.ErrUnknownEventType), ports.ReasonUnknownType},
		{fmt.Errorf("perspective p: %w", perspective.ErrNoHandler), ports.ReasonUnknownType},
		{fmt.Errorf("projection p: %w", modelstore.ErrWriteDeadline), ports.ReasonTimedOut},
	} {
		require.Equal(t, tc.want, Reason(tc.err), tc.err.Error())
	}
}
