package statuspage_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/vantage-go/vantage/internal/pgtest"
)

// TestMain closes the shared database once the tests ran, then checks for
// leaked goroutines.
func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.WrapMain(m)) }
