package statuspage_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/ports"
	"github.com/vantage-go/vantage/statuspage"
)

// operatorKey marks, on a request's context, what the application's
// authentication established: here, that an operator signed in.
type operatorKey struct{}

// The page mounted under a prefix of the application's mux, behind its
// authentication (which here only tells operators): a request reads it,
// only an operator's acts.
func Example() {
	ctx := context.Background()
	backend := memory.New(memory.Options{}).Backend()
	err := backend.Events.SubscriptionsRegister(ctx, &ports.SubscriptionsRegisterParams{
		Subscriptions: []ports.Subscription{{EventType: "order_placed", Perspective: "orders"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	page, err := statuspage.New(backend, &statuspage.Options{
		AuthorizeFunc: func(r *http.Request) bool { return r.Context().Value(operatorKey{}) != nil },
		Logger:        slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	// signIn stands for the application's authentication, which would
	// check a session and mark operators.
	signIn := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") == "Bearer operator" {
				r = r.WithContext(context.WithValue(r.Context(), operatorKey{}, true))
			}
			next.ServeHTTP(w, r)
		})
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/vantage/", signIn(http.StripPrefix("/ops/vantage", page)))

	do := func(method, target, auth string, form url.Values) {
		req := httptest.NewRequest(method, target, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", auth)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		fmt.Println(strings.TrimSpace(fmt.Sprintln(method, target, rec.Code, rec.Header().Get("Location"))))
	}
	do("GET", "/ops/vantage/", "", nil)
	do("POST", "/ops/vantage/requeue-all", "", url.Values{"perspective": {"orders"}})
	do("POST", "/ops/vantage/requeue-all", "Bearer operator", url.Values{"perspective": {"orders"}})
	// Output:
	// GET /ops/vantage/ 200
	// POST /ops/vantage/requeue-all 403
	// POST /ops/vantage/requeue-all 303 ./dead-letters?perspective=orders
}
