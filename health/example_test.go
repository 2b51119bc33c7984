package health_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/health"
)

// The probes of a worker, mounted on the application's mux: not live
// before Start, live and ready once started and its startup scan done, and
// not live once stopped (a Worker runs once: only a new process helps).
func Example() {
	ctx := context.Background()
	reg := core.NewRegistry()
	core.MustRegisterEvent[signedUp](reg, "signed_up")
	w, err := core.New(memory.New(memory.Options{}).Backend(), reg, &core.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	health.Register(mux, w)
	probe := func(target string) string {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
		return fmt.Sprintf("%s %d\n%s", target, rec.Code, rec.Body)
	}
	// verdict keeps the status and the last line of a readiness answer,
	// which lists every check.
	verdict := func(answer string) string {
		lines := strings.Split(strings.TrimSpace(answer), "\n")
		return lines[0] + "\n" + lines[len(lines)-1] + "\n"
	}

	fmt.Print(probe("/livez"))
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	<-w.StartupScanComplete()
	fmt.Print(probe("/livez"))
	fmt.Print(verdict(probe("/readyz")))
	if err := w.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Print(probe("/livez"))
	// Output:
	// /livez 503
	// [-]running failing: not started
	// livez check failed
	// /livez 200
	// [+]running ok: running
	// livez check passed
	// /readyz 200
	// readyz check passed
	// /livez 503
	// [-]running failing: stopped
	// livez check failed
}
