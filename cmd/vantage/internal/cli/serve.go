package cli

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/vantage-go/vantage/ports"
	"github.com/vantage-go/vantage/statuspage"
)

// Settings of serve.
const (
	// EnvToken names the environment variable serve reads its token from
	// when --token is not given.
	EnvToken = "VANTAGE_TOKEN"
	// ServeAddrDefault is the address serve listens on unless --addr says
	// otherwise: the loopback interface only.
	ServeAddrDefault = "127.0.0.1:8080"
	// TokenMinLength is the shortest token serve accepts: the sign-in
	// form can be tried as often as one likes.
	TokenMinLength = 16
	// ServeShutdownTimeout bounds how long serve, once stopped, waits for
	// the requests in flight.
	ServeShutdownTimeout = 10 * time.Second
)

func (a *app) serveCommand() *cobra.Command {
	var addr, token string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the status page of the schema over HTTP",
		Long: `Serve the status page of the schema over HTTP until interrupted (Ctrl-C,
SIGTERM), then finish the requests in flight and exit 0. It prints the URL
it listens on.

The page shows every perspective (streams, caught up, behind, failed,
rewinds required, pending events and the age of the oldest, waiting dead
letters, retired), the engine instances with their heartbeats and leased
streams, the rebuild requests with their progress, and the dead letters
with their errors in full.

Without a token the page is read-only for everyone. With --token, or the
VANTAGE_TOKEN environment variable (which, unlike a flag, other users of
the machine cannot read), it has a sign-in form at /login: a browser that
posts the token gets a session cookie (HttpOnly, SameSite=Strict) and the
page's buttons: requeue or ignore a dead letter, requeue every waiting dead
letter of a perspective, request a rebuild, retire (after a confirmation)
and revive a perspective. Every action is a POST that must come from the
page itself (cross-origin requests are refused), and is logged on stderr.
The token must be at least 16 characters; the sessions last until the
browser closes or serve restarts.

serve speaks plain HTTP and listens on the loopback interface by default.
To reach it from elsewhere, keep it on loopback behind a reverse proxy that
adds TLS and your own authentication, or give --addr with care: the token
and the cookie would cross the network in clear.

Each request's database calls are bounded by --timeout.

JSON: {"url", "schema", "read_only"}, printed once listening.`,
		Example: `  vantage serve
  VANTAGE_TOKEN="$(cat ~/.vantage-token)" vantage serve --addr 127.0.0.1:9090
  vantage --schema billing serve --addr 127.0.0.1:0   # any free port`,
		Args: cobra.NoArgs,
	}
	cmd.RunE = a.action(func(ctx context.Context, _ []string) error {
		if token == "" {
			token = a.env.Getenv(EnvToken)
		}
		if token != "" && len(token) < TokenMinLength {
			return usageErrorf("--token must be at least %d characters, got %d", TokenMinLength, len(token))
		}
		return a.serve(ctx, addr, token)
	})
	cmd.Flags().StringVar(&addr, "addr", ServeAddrDefault, "address to listen on, host:port (port 0: any free port)")
	cmd.Flags().StringVar(&token, "token", "", "token that signs a browser in to act (default $"+EnvToken+"; none: read-only)")
	return cmd
}

type serveReport struct {
	URL      string `json:"url"`
	Schema   string `json:"schema"`
	ReadOnly bool   `json:"read_only"`
}

func (r *serveReport) writeText(w io.Writer) {
	mode := "read-only: start it with a token (--token or " + EnvToken + ") to act"
	if !r.ReadOnly {
		mode = "sign in at " + r.URL + "login to act"
	}
	fmt.Fprintf(w, "serving the status page of schema %q on %s (%s)\n", r.Schema, r.URL, mode)
}

func (a *app) serve(ctx context.Context, addr, token string) error {
	s, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	logger := slog.New(slog.NewTextHandler(a.stderr, nil))
	opts := &statuspage.Options{
		Logger: logger,
		Title:  "Vantage · " + a.schema,
		ActorFunc: func(r *http.Request) string {
			return "vantage serve, " + r.RemoteAddr
		},
	}
	if a.env.Now != nil {
		opts.Clock = nowFunc(a.env.Now)
	}
	mux := http.NewServeMux()
	if token != "" {
		login, err := newTokenLogin(token, opts.Title, logger)
		if err != nil {
			return err
		}
		opts.AuthorizeFunc = login.authorized
		opts.SignInURL = "login"
		mux.Handle("/login", http.NewCrossOriginProtection().Handler(login))
	}
	page, err := statuspage.New(ports.Backend{Admin: s.admin, DeadLetters: s.deadLetters}, opts)
	if err != nil {
		return err
	}
	mux.Handle("/", a.bounded(page))

	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	// wait waits for Serve to return, which it does with
	// http.ErrServerClosed once stopped, or another error before.
	wait := func() error {
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serving: %w", err)
		}
		return nil
	}
	if err := a.print(&serveReport{URL: listenURL(ln.Addr()), Schema: a.schema, ReadOnly: token == ""}); err != nil {
		_ = srv.Close()
		return errors.Join(err, wait())
	}

	select {
	case <-ctx.Done():
	case err := <-served: // the listener failed
		return fmt.Errorf("serving: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ServeShutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		_ = srv.Close()
		err = fmt.Errorf("requests still in flight %s after the stop: closed their connections", ServeShutdownTimeout)
	}
	return errors.Join(err, wait())
}

// bounded bounds the database calls of each request by --timeout.
func (a *app) bounded(h http.Handler) http.Handler {
	if a.timeout == 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// listenURL is the URL of the page served on addr: on an address of every
// interface, the loopback one's.
func listenURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String() + "/"
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}

// nowFunc is Env.Now as the status page's clock.
type nowFunc func() time.Time

func (f nowFunc) Now() time.Time { return f() }

// sessionCookie holds a signed-in browser's session.
const sessionCookie = "vantage_session"

// tokenLogin signs a browser in with the token: its form posts the token,
// and a browser that posted the right one gets a session cookie, which
// authorized accepts. The session is one random value made at start, never
// the token itself, so that the cookie does not reveal the token and a
// restart signs every browser out.
type tokenLogin struct {
	tokenHash [sha256.Size]byte
	session   string
	title     string
	log       *slog.Logger
}

func newTokenLogin(token, title string, logger *slog.Logger) (*tokenLogin, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("making the session: %w", err)
	}
	return &tokenLogin{
		tokenHash: sha256.Sum256([]byte(token)),
		session:   base64.RawURLEncoding.EncodeToString(b[:]),
		title:     title,
		log:       logger,
	}, nil
}

// authorized reports whether r comes from a signed-in browser.
func (l *tokenLogin) authorized(r *http.Request) bool {
	c, err := r.Cookie(sessionCookie)
	return err == nil && subtle.ConstantTimeCompare([]byte(c.Value), []byte(l.session)) == 1
}

// ServeHTTP serves /login: the form on GET, signing in or out on POST.
func (l *tokenLogin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		l.form(w, r, http.StatusOK, "")
		return
	case http.MethodPost:
	default:
		h.Set("Allow", "GET, HEAD, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if err := r.ParseForm(); err != nil {
		l.form(w, r, http.StatusBadRequest, "Unreadable form.")
		return
	}
	if r.PostFormValue("sign_out") != "" {
		l.setCookie(w, r, "", -1)
		l.log.InfoContext(r.Context(), "signed out", slog.String("remote_addr", r.RemoteAddr))
		seeOther(w, "./")
		return
	}
	// Hashed, so that the comparison takes the same time whatever the
	// length of what was posted.
	given := sha256.Sum256([]byte(r.PostFormValue("token")))
	if subtle.ConstantTimeCompare(given[:], l.tokenHash[:]) != 1 {
		l.log.WarnContext(r.Context(), "sign-in refused: wrong token", slog.String("remote_addr", r.RemoteAddr))
		l.form(w, r, http.StatusUnauthorized, "Wrong token.")
		return
	}
	l.setCookie(w, r, l.session, 0)
	l.log.InfoContext(r.Context(), "signed in", slog.String("remote_addr", r.RemoteAddr))
	seeOther(w, "./")
}

// setCookie sets the session cookie to value for the browser's session
// (maxAge 0), or deletes it (maxAge -1).
func (l *tokenLogin) setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
}

// seeOther redirects, relative to the request's path, after a POST.
func seeOther(w http.ResponseWriter, location string) {
	w.Header().Set("Location", location)
	w.WriteHeader(http.StatusSeeOther)
}

// loginPage is the sign-in form, styled by the status page's stylesheet.
var loginPage = template.Must(template.New("login").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex">
<title>Sign in · {{.Title}}</title>
<link rel="stylesheet" href="assets/style.css">
</head>
<body>
<header class="top"><a class="brand" href="./">{{.Title}}</a></header>
<main>
<h1>Sign in</h1>
{{- if .SignedIn}}
<p id="signed-in">You are signed in: the status page offers its actions.</p>
<form method="post" action="login"><button type="submit" name="sign_out" value="yes" class="secondary">Sign out</button></form>
{{- else}}
{{with .Error}}<p class="flash error" id="login-error" role="alert">{{.}}</p>{{end}}
<form method="post" action="login" class="confirm">
  <label>Token <input type="password" name="token" autocomplete="current-password" required autofocus></label>
  <button type="submit">Sign in</button>
</form>
<p class="note">The token vantage serve was started with (--token or VANTAGE_TOKEN). Signed in, the page offers its actions until the browser closes.</p>
{{- end}}
<p><a href="./">Back to the status page</a></p>
</main>
</body>
</html>
`))

func (l *tokenLogin) form(w http.ResponseWriter, r *http.Request, code int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_ = loginPage.Execute(w, struct {
		Title, Error string
		SignedIn     bool
	}{l.title, msg, l.authorized(r)}) // the client went away: nobody to tell
}
