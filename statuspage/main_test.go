package statuspage_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/vantage-go/vantage/internal/pgtest"
)

// TestMain closes the shared database and browser once the tests ran, and
// then checks for leaked goroutines.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(closingBrowser{pgtest.WrapMain(m)})
}

// closingBrowser runs the tests, then stops the browser the browser tests
// started, if any.
type closingBrowser struct{ m interface{ Run() int } }

func (c closingBrowser) Run() int {
	code := c.m.Run()
	closeBrowser()
	return code
}
