package statuspage

import (
	"cmp"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/vantage-go/vantage/ports"
)

// Defaults and limits of Options.
const (
	// LiveWithinDefault is the default of Options.LiveWithin, the engine's
	// default core.Options.Claims.StaleInstanceThreshold.
	LiveWithinDefault = 30 * time.Second
	// PageSizeDefault is the default of Options.PageSize.
	PageSizeDefault = 50
	// PageSizeMax bounds Options.PageSize.
	PageSizeMax = 500
	// ActorDefault is who an action is recorded as without
	// Options.ActorFunc.
	ActorDefault = "status page"
)

// Options configure the handler New returns. The zero value serves a
// read-only page.
type Options struct {
	// AuthorizeFunc reports whether the request may act: requeue or ignore
	// dead letters, request a rebuild, retire or revive a perspective. The
	// pages show their buttons only when it returns true, and every action
	// asks it again before it changes anything. It authorizes, it does
	// not authenticate: it reads what the application's authentication
	// established for the request (a session, a role on its context). It
	// is called for every request, concurrently. Defaults to nil: the page
	// is read-only for everyone.
	AuthorizeFunc func(r *http.Request) bool
	// ActorFunc names who makes an authorized request, for the records of
	// its actions: the RequestedBy of a rebuild request, and the log line
	// of every action. Defaults to ActorDefault for everyone.
	ActorFunc func(r *http.Request) string
	// Clock is the time the pages measure ages at (heartbeats, dead
	// letters, rebuilds). When set, the page also passes its time to the
	// backend (tests); when nil the real clock is used and the backend
	// uses its own (the database's on PostgreSQL) for what it measures
	// itself: backlog ages, and the times of the actions. Any ports.Clock
	// will do.
	Clock interface{ Now() time.Time }
	// Logger receives a line for every action taken (Info), every request
	// refused as cross-origin (Warn) and every backend error (Error), each
	// with the component "statuspage". Defaults to slog.Default().
	Logger *slog.Logger
	// LiveWithin is the age below which an instance's last heartbeat shows
	// it live: set it to the engines'
	// core.Options.Claims.StaleInstanceThreshold. Defaults to
	// LiveWithinDefault. Must not be negative.
	LiveWithin time.Duration
	// PageSize is how many dead letters a page lists. Defaults to
	// PageSizeDefault. Must be between 0 and PageSizeMax.
	PageSize int
	// SignInURL, when set, is linked as "Sign in" from the header of every
	// page served to a request AuthorizeFunc does not authorize. A
	// relative URL is resolved against the page's root. Defaults to no
	// link.
	SignInURL string
	// Title heads every page and names the browser tab. Defaults to
	// "Vantage".
	Title string
}

// New returns the handler of the status page of backend, which must
// provide the Admin and DeadLetters ports. Its pages and actions all sit
// at the root of its path, so it can be mounted under a prefix with
// http.StripPrefix; see the package documentation. It returns an error
// naming every missing port and invalid option. The handler is safe for
// concurrent use.
func New(backend ports.Backend, opts *Options) (http.Handler, error) {
	if opts == nil {
		opts = &Options{}
	}
	var errs []error
	if backend.Admin == nil {
		errs = append(errs, errors.New("ports.Backend.Admin is nil: the status page reads and acts through it"))
	}
	if backend.DeadLetters == nil {
		errs = append(errs, errors.New("ports.Backend.DeadLetters is nil: the status page lists dead letters through it"))
	}
	if opts.LiveWithin < 0 {
		errs = append(errs, fmt.Errorf("Options.LiveWithin must not be negative, got %s", opts.LiveWithin))
	}
	if opts.PageSize < 0 || opts.PageSize > PageSizeMax {
		errs = append(errs, fmt.Errorf("Options.PageSize must be between 0 and %d, got %d", PageSizeMax, opts.PageSize))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	p := &page{
		admin:       backend.Admin,
		deadLetters: backend.DeadLetters,
		authorize:   opts.AuthorizeFunc,
		actor:       opts.ActorFunc,
		clock:       opts.Clock,
		log:         logger.With(slog.String("component", "statuspage")),
		liveWithin:  cmp.Or(opts.LiveWithin, LiveWithinDefault),
		pageSize:    cmp.Or(opts.PageSize, PageSizeDefault),
		signInURL:   opts.SignInURL,
		title:       cmp.Or(opts.Title, "Vantage"),
	}
	p.routes()
	return p, nil
}

//go:embed assets
var assetsFS embed.FS

// page is the handler New returns. Its fields do not change after New.
type page struct {
	admin       ports.Admin
	deadLetters ports.DeadLetterStore
	authorize   func(*http.Request) bool
	actor       func(*http.Request) string
	clock       interface{ Now() time.Time }
	log         *slog.Logger
	liveWithin  time.Duration
	pageSize    int
	signInURL   string
	title       string
	mux         *http.ServeMux
}

// The paths of the pages and actions, relative to the page's root. Every
// one is a single segment, so that a link from any page to any other is
// the bare name, whatever prefix the handler is mounted under.
const (
	pathOverview    = ""
	pathDeadLetters = "dead-letters"
	pathDeadLetter  = "dead-letter"
	pathPerspective = "perspective"
	pathRetire      = "retire"
	pathAssets      = "assets/"

	pathRequeue    = "requeue"
	pathRequeueAll = "requeue-all"
	pathIgnore     = "ignore"
	pathRebuild    = "rebuild"
	pathRevive     = "revive"
)

func (p *page) routes() {
	csrf := http.NewCrossOriginProtection()
	csrf.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.log.WarnContext(r.Context(), "cross-origin request refused",
			slog.String("path", r.URL.Path), slog.String("origin", r.Header.Get("Origin")),
			slog.String("sec_fetch_site", r.Header.Get("Sec-Fetch-Site")), slog.String("remote_addr", r.RemoteAddr))
		p.fail(w, r, http.StatusForbidden, "Cross-origin request refused",
			"This action was posted from another site. Use the buttons of the status page itself.")
	}))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", p.overview)
	mux.HandleFunc("GET /"+pathDeadLetters, p.deadLettersPage)
	mux.HandleFunc("GET /"+pathDeadLetter, p.deadLetterPage)
	mux.HandleFunc("GET /"+pathPerspective, p.perspectivePage)
	mux.HandleFunc("GET /"+pathRetire, p.retireConfirmPage)
	mux.Handle("GET /"+pathAssets, http.StripPrefix("/assets/", http.FileServerFS(mustSub(assetsFS, "assets"))))
	// The actions answer every method, so that a GET gets the page that
	// says only POST is accepted (405) rather than the page not found.
	for name, act := range map[string]http.HandlerFunc{
		pathRequeue:    p.requeue,
		pathRequeueAll: p.requeueAll,
		pathIgnore:     p.ignore,
		pathRebuild:    p.rebuild,
		pathRetire:     p.retire,
		pathRevive:     p.revive,
	} {
		mux.Handle("/"+name, csrf.Handler(p.action(act)))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		p.fail(w, r, http.StatusNotFound, "Page not found", "The status page has no page at this address.")
	})
	p.mux = mux
}

func mustSub(fsys fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(err) // dir is a constant naming an embedded directory
	}
	return sub
}

// ServeHTTP serves the pages, the actions and the stylesheet.
func (p *page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// The pages load nothing but their stylesheet, run no script, post
	// only to themselves and must not be framed, which would let another
	// site trick a click on an action.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	r, ok := rooted(w, r)
	if !ok {
		return
	}
	p.mux.ServeHTTP(w, r)
}

// rooted returns r with a path that starts with a slash, as the routes
// expect, when the handler is mounted by a StripPrefix that took the slash
// too. The links are relative to the page's root, so the root must end
// with a slash: mounted under a pattern without one, the root redirects
// to itself with one, and rooted reports false.
func rooted(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	if strings.HasPrefix(r.URL.Path, "/") {
		return r, true
	}
	if r.URL.Path == "" {
		if reqPath := requestPath(r); !strings.HasSuffix(reqPath, "/") {
			target := path.Base(reqPath) + "/"
			if r.URL.RawQuery != "" {
				target += "?" + r.URL.RawQuery
			}
			// Not http.Redirect, which would resolve target against the
			// stripped path.
			w.Header().Set("Location", target)
			w.WriteHeader(http.StatusMovedPermanently)
			return nil, false
		}
	}
	r2 := new(http.Request)
	*r2 = *r
	r2.URL = new(url.URL)
	*r2.URL = *r.URL
	r2.URL.Path = "/" + r.URL.Path
	if r.URL.RawPath != "" {
		r2.URL.RawPath = "/" + r.URL.RawPath
	}
	return r2, true
}

// requestPath returns the path the client asked for, before any
// StripPrefix.
func requestPath(r *http.Request) string {
	if u, err := url.ParseRequestURI(r.RequestURI); err == nil && u.Path != "" {
		return u.Path
	}
	return "/"
}

// authorized reports whether r may act.
func (p *page) authorized(r *http.Request) bool {
	return p.authorize != nil && p.authorize(r)
}

// now returns the page's time, and the time to pass to the backend: zero
// without a Clock, so that the backend uses its own.
func (p *page) now() (now, backendNow time.Time) {
	if p.clock == nil {
		return time.Now(), time.Time{}
	}
	t := p.clock.Now()
	return t, t
}

// actorOf names who makes r.
func (p *page) actorOf(r *http.Request) string {
	if p.actor == nil {
		return ActorDefault
	}
	if a := p.actor(r); a != "" {
		return a
	}
	return ActorDefault
}
