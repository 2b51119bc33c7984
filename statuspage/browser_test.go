package statuspage_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
	"github.com/vantage-go/vantage/statuspage"
)

// The browser tests drive a real Chromium through chromedp: one browser
// for the test process, started by the first browser test and stopped by
// TestMain, and a tab of its own for each test, in a browser context (a
// profile with its own cookies) of its own.
//
// Without Chromium they skip, unless the CI environment variable is set:
// then they fail, as the PostgreSQL tests do (.ci/run installs it).
const (
	// envChromium names the browser to run instead of the first of
	// chromiumPaths found.
	envChromium = "VANTAGE_TEST_CHROMIUM"
	// envScreenshots names the directory the tests save their screenshots
	// in; a temporary directory of the test when unset.
	envScreenshots = "VANTAGE_SCREENSHOTS"
	envCI          = "CI"
	// browserTimeout bounds each step of a browser test.
	browserTimeout = 30 * time.Second
)

// chromiumPaths are where Debian and others install Chromium or Chrome.
var chromiumPaths = []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// shared is the test process's browser.
var shared struct {
	once   sync.Once
	ctx    context.Context // the browser's first tab; its children are tabs of the browser
	cancel func()          // stops the browser, waits for it to exit and removes its profile
	err    error           // why it did not start
	absent bool            // err is that no browser is installed
}

// findChromium returns the browser to run, or an error saying how to
// install one.
func findChromium() (string, error) {
	if path := os.Getenv(envChromium); path != "" {
		return path, nil
	}
	for _, name := range chromiumPaths {
		if path, err := exec.LookPath(name); err == nil {
			return path, nil
		}
	}
	return "", fmt.Errorf("no Chromium for the browser tests: install it (Debian: apt-get install chromium) or set %s", envChromium)
}

// startBrowser starts the shared browser with flags that keep it off the
// network: the test machine may have none, and Chromium's background
// requests then hang on refused connections.
func startBrowser() {
	path, err := findChromium()
	if err != nil {
		shared.err, shared.absent = err, true
		return
	}
	dir, err := os.MkdirTemp("", "vantage-chromium-")
	if err != nil {
		shared.err = err
		return
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.UserDataDir(dir),
		chromedp.Headless,
		chromedp.NoSandbox, // the tests may run as root, in a container
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 900),
	)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	shared.ctx = ctx
	shared.cancel = func() {
		cancelCtx()
		cancelAlloc() // waits for the browser to exit
		_ = os.RemoveAll(dir)
	}
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		shared.err = fmt.Errorf("starting %s: %w", path, err)
	}
}

// closeBrowser stops the shared browser, if a test started it.
func closeBrowser() {
	if shared.cancel != nil {
		shared.cancel()
	}
}

// newTab returns a new tab of the shared browser, closed when the test
// ends, in a browser context of its own: the tests run in parallel, and
// cookies, shared by every port of 127.0.0.1, would leak from one test's
// page to another's. It skips the test without a browser, unless CI is
// set.
func newTab(t *testing.T) context.Context {
	t.Helper()
	shared.once.Do(startBrowser)
	switch {
	case shared.absent && os.Getenv(envCI) == "":
		t.Skipf("%v (CI is not set, so the browser tests are skipped)", shared.err)
	case shared.absent:
		t.Fatalf("%v (CI is set, so this is an error)", shared.err)
	case shared.err != nil:
		t.Fatal(shared.err)
	}
	tab, cancel := chromedp.NewContext(shared.ctx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Do(tab)) // opens the tab, bound to tab, not to a step's deadline
	return tab
}

// do runs steps in the tab, each run bounded by browserTimeout.
func do(t *testing.T, tab context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, browserTimeout)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, steps...))
}

// run runs one action that returns a value in the tab.
func run[T any](t *testing.T, tab context.Context, action chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, browserTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, action)
	require.NoError(t, err)
	return v
}

// pngSignature starts every PNG file.
var pngSignature = []byte("\x89PNG\r\n\x1a\n")

// screenshot saves a full-page screenshot of the tab as name.png in the
// screenshots directory and checks that it is a PNG with something in it.
func screenshot(t *testing.T, tab context.Context, name string) {
	t.Helper()
	png := run(t, tab, chromedp.FullScreenshot(100))
	require.True(t, bytes.HasPrefix(png, pngSignature), "a PNG")
	require.Greater(t, len(png), 10_000, "a page, not a blank image")
	dir := os.Getenv(envScreenshots)
	if dir == "" {
		dir = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	path := filepath.Join(dir, regexp.MustCompile(`[^A-Za-z0-9_-]+`).ReplaceAllString(t.Name()+"_"+name, "_")+".png")
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
}

// prefix is where the browser tests mount the page, as an application
// would.
const prefix = "/ops/vantage/"

// serve serves the fixture's page under prefix on a local HTTP server,
// and returns its URL.
func serve(t *testing.T, f *fixture, opts statuspage.Options) string {
	t.Helper()
	opts.Clock = fixedClock{}
	opts.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	page, err := statuspage.New(f.b, &opts)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle(prefix, http.StripPrefix(prefix[:len(prefix)-1], page))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + prefix
}

// readPerspectives reads the perspectives table as the browser renders
// it: each row's cells, by class, by perspective.
const readPerspectives = `Object.fromEntries([...document.querySelectorAll('#perspectives tbody tr[data-perspective]')].map(tr => [
	tr.dataset.perspective,
	Object.fromEntries(['streams', 'caught-up', 'behind', 'failed', 'rewinds', 'pending', 'lag', 'retrying', 'dead-letters']
		.map(c => [c, tr.querySelector('td.' + c).innerText.trim()])),
]))`

// TestBrowserOverview loads the overview in Chromium and reads the
// perspectives table as rendered, with its stylesheet applied under the
// prefix.
func TestBrowserOverview(t *testing.T) {
	t.Parallel()

	tab := newTab(t)
	f := seed(t, newMemory(t))
	url := serve(t, f, statuspage.Options{})

	do(t, tab, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#perspectives")))
	got := run(t, tab, chromedp.Evaluate[map[string]map[string]string](readPerspectives))
	require.Equal(t, map[string]map[string]string{
		orderSummary: {
			"streams": "2", "caught-up": "0", "behind": "2", "failed": "1", "rewinds": "0",
			"pending": "2", "lag": "10m", "retrying": "1", "dead-letters": "1",
		},
		customerStats: {
			"streams": "1", "caught-up": "1", "behind": "1", "failed": "0", "rewinds": "0",
			"pending": "1", "lag": "10m", "retrying": "0", "dead-letters": "0",
		},
		legacyTotals: {
			"streams": "0", "caught-up": "0", "behind": "0", "failed": "0", "rewinds": "0",
			"pending": "0", "lag": "–", "retrying": "0", "dead-letters": "0",
		},
	}, got)
	heartbeat := run(t, tab, chromedp.Evaluate[[]string](fmt.Sprintf(
		`(e => [e.innerText, e.title])(document.querySelector('tr[data-id=%q] td.heartbeat time'))`, f.a.String())))
	require.Equal(t, []string{"12s ago", "2026-03-01T11:59:48Z"}, heartbeat, "relative, absolute in the title")
	styled := run(t, tab, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('#perspectives')).borderCollapse`))
	require.Equal(t, "collapse", styled, "the stylesheet loads under the prefix")
	screenshot(t, tab, "overview")

	do(t, tab,
		chromedp.Click(chromedp.CSS(`tr[data-perspective="order_summary"] td.name a`)),
		chromedp.WaitVisible(chromedp.CSS("#figures")),
	)
	require.Equal(t, "Perspective order_summary", run(t, tab, chromedp.Text(chromedp.CSS("h1"))))
	screenshot(t, tab, "perspective")
}

// TestBrowserRequeue clicks Requeue on a dead letter as an authorized
// operator: the page comes back with the flash message, and the backend
// has the dead letter requeued.
func TestBrowserRequeue(t *testing.T) {
	t.Parallel()

	tab := newTab(t)
	f := seed(t, newMemory(t))
	url := serve(t, f, authorized())
	row := fmt.Sprintf(`tr[data-id=%q]`, f.deadLetter.ID.String())

	do(t, tab, chromedp.Navigate(url+"dead-letters"), chromedp.WaitVisible(chromedp.CSS(row+" button.requeue")))
	screenshot(t, tab, "dead-letters")
	res, err := func() (*network.Response, error) {
		ctx, cancel := context.WithTimeout(tab, browserTimeout)
		defer cancel()
		return chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(row+" button.requeue")))
	}()
	require.NoError(t, err)
	require.Equal(t, int64(http.StatusOK), res.Status, "the redirect after the POST lands on the page")
	do(t, tab, chromedp.WaitVisible(chromedp.ID("flash")))
	require.Equal(t, "Requeued dead letter "+f.deadLetter.ID.String()+": its event is pending again.",
		run(t, tab, chromedp.Text(chromedp.ID("flash"))))
	require.Equal(t, url+"dead-letters", run(t, tab, chromedp.Location()), "back to the page of the form, under the prefix")
	require.Equal(t, "No dead letters.", run(t, tab, chromedp.Text(chromedp.CSS("table.dead-letters td.empty"))))
	screenshot(t, tab, "requeued")

	dl, err := f.b.Admin.DeadLetterGet(t.Context(), &ports.DeadLetterGetParams{ID: f.deadLetter.ID})
	require.NoError(t, err)
	require.Equal(t, ports.DeadLetterRequeued, dl.Status)

	do(t, tab,
		chromedp.Navigate(url+"dead-letter?id="+f.deadLetter.ID.String()),
		chromedp.WaitVisible(chromedp.ID("status")),
	)
	require.Equal(t, "requeued", run(t, tab, chromedp.Text(chromedp.ID("status"))))
	require.Equal(t, 0, run(t, tab, chromedp.Evaluate[int](`document.querySelectorAll('#flash').length`)), "the flash showed once")
}

// TestBrowserRetire retires a perspective through its confirmation page.
func TestBrowserRetire(t *testing.T) {
	t.Parallel()

	tab := newTab(t)
	f := seed(t, newMemory(t))
	url := serve(t, f, authorized())

	do(t, tab,
		chromedp.Navigate(url+"perspective?name="+customerStats),
		chromedp.Click(chromedp.ID("retire")),
		chromedp.WaitVisible(chromedp.ID("confirm-retire")),
	)
	screenshot(t, tab, "confirm")
	retired, err := f.b.Admin.PerspectivesRetired(t.Context())
	require.NoError(t, err)
	require.Equal(t, []string{legacyTotals}, retired, "the confirmation page changes nothing")

	do(t, tab, chromedp.Click(chromedp.ID("confirm-retire")), chromedp.WaitVisible(chromedp.ID("flash")))
	require.Equal(t, "Retired customer_stats: deleted 1 subscription and 1 pending work row.", run(t, tab, chromedp.Text(chromedp.ID("flash"))))
	retired, err = f.b.Admin.PerspectivesRetired(t.Context())
	require.NoError(t, err)
	require.Equal(t, []string{customerStats, legacyTotals}, retired)
}

// TestBrowserReadOnly loads every page without authorization: no button,
// no form that posts.
func TestBrowserReadOnly(t *testing.T) {
	t.Parallel()

	tab := newTab(t)
	f := seed(t, newMemory(t))
	url := serve(t, f, statuspage.Options{SignInURL: "/login"})

	for i, page := range []string{"", "dead-letters", "dead-letter?id=" + f.deadLetter.ID.String(), "perspective?name=" + orderSummary} {
		do(t, tab, chromedp.Navigate(url+page), chromedp.WaitVisible(chromedp.ID("mode")))
		require.Equal(t, "read-only", run(t, tab, chromedp.Text(chromedp.ID("mode"))), page)
		actions := run(t, tab, chromedp.Evaluate[int](
			`document.querySelectorAll('form[method=post], button.requeue, button.ignore, button.requeue-all, button.rebuild, button.revive, #retire').length`))
		require.Zero(t, actions, "%s: no action for a read-only request", page)
		if i == 0 {
			require.Equal(t, "Sign in", run(t, tab, chromedp.Text(chromedp.ID("sign-in"))))
			screenshot(t, tab, "overview")
		}
	}
	do(t, tab, chromedp.Navigate(url+"dead-letter?id="+f.deadLetter.ID.String()), chromedp.WaitVisible(chromedp.ID("error")))
	require.Equal(t, gatewayError, run(t, tab, chromedp.Evaluate[string](`document.getElementById('error').textContent`)), "the error in full")
	screenshot(t, tab, "dead-letter")
}
