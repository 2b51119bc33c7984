// Package statuspage serves an HTML status page of a Vantage backend for
// operators: the state of every perspective, the engine instances, the
// rebuild requests and the dead letters, and, for the requests the
// application authorizes, the actions that fix what it shows. Mount it
// on the application's mux, behind the application's own authentication:
//
//	page, err := statuspage.New(backend, &statuspage.Options{
//		AuthorizeFunc: func(r *http.Request) bool { return isOperator(r.Context()) },
//	})
//	if err != nil { ... }
//	mux.Handle("/vantage/", requireLogin(http.StripPrefix("/vantage", page)))
//
// The page renders on the server with html/template; its stylesheet is
// embedded, it runs no script and needs none. Every link is relative and
// every page sits at the root of the handler's path, so it works under any
// prefix that http.StripPrefix removes.
//
// # Pages
//
//   - the overview (the root): per perspective its streams, caught up,
//     behind, failed, rewinds required, pending events and the age of the
//     oldest (lag), failed events awaiting their retry, waiting dead letters
//     and whether it is retired (ports.Admin.PerspectivesStatus); the
//     instances with their heartbeat's age, liveness and leased streams;
//     the pending and running rebuild requests with their progress and an
//     estimate of the time left, and the latest finished ones;
//   - dead-letters: the dead letters, newest first, filtered by
//     perspective and status, Options.PageSize a page;
//   - dead-letter?id=ID: one dead letter with its error in full;
//   - perspective?name=NAME: one perspective's figures, its latest
//     waiting dead letters and its rebuild requests.
//
// Times are shown relative to the page's clock ("12s ago"), with the
// absolute time in UTC in their title. An unknown dead letter or
// perspective gets a 404 page, a malformed id or parameter a 400 page, and
// a backend error a 500 page with the error, which is also logged.
//
// # Actions and security
//
// The page is read-only by default: without Options.AuthorizeFunc, or
// when it returns false for a request, no page shows a button, and every
// action answers 403 Forbidden and changes nothing. When it returns true,
// the pages offer these actions, each a POST to a path at the root of the
// handler (requeue, ignore, requeue-all, rebuild, retire, revive):
//
//   - requeue and ignore a dead letter (ports.Admin.DeadLetterRequeue,
//     DeadLetterIgnore);
//   - requeue every waiting dead letter of a perspective
//     (DeadLettersRequeue);
//   - request a rebuild of a perspective (RebuildRequest, recorded as
//     requested by Options.ActorFunc);
//   - retire a perspective, after a confirmation page that may also drop
//     its models (PerspectiveRetire), and revive it (PerspectiveRevive).
//
// Every action accepts only POST (405 otherwise), asks AuthorizeFunc
// again, and is guarded against cross-site request forgery by
// [net/http.CrossOriginProtection]: a browser request from another origin
// (Sec-Fetch-Site, else an Origin that does not match the Host) gets 403
// and changes nothing. An action that took effect is logged at Info with
// its actor and redirects (303 See Other) back to the page its form came
// from, which shows what it did once (a short-lived cookie carries the
// message). The responses forbid scripts, framing (Content-Security-Policy,
// X-Frame-Options) and caching.
//
// AuthorizeFunc authorizes; it does not authenticate. Serve the page where
// only operators reach it, behind the application's authentication, and
// let AuthorizeFunc read what that established. Even read-only, the page
// shows stream ids, perspective names and the errors of failed applies,
// which may quote event data.
package statuspage
