package cli_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/cmd/vantage/internal/cli"
	"github.com/vantage-go/vantage/ports"
)

// lines is an io.Writer that hands each line written to a channel, and
// keeps everything: the stdout and stderr of a serve running in the
// background.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
	c   chan string
}

func newLines() *lines { return &lines{c: make(chan string, 64)} }

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for _, line := range strings.SplitAfter(string(p), "\n") {
		if strings.HasSuffix(line, "\n") {
			select {
			case l.c <- strings.TrimSuffix(line, "\n"):
			default: // nobody waits for more
			}
		}
	}
	return len(p), nil
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// served is a 'vantage serve' running in the background.
type served struct {
	url    string // as it printed it
	stdout *lines
	stderr *lines
	stop   func() int // cancels its context and returns its exit code
	client *http.Client
}

// servingURL finds the URL serve prints, as text or JSON.
var servingURL = regexp.MustCompile(`(?:on |"url": ")(http://127\.0\.0\.1:\d+/)`)

// serve runs 'vantage serve' on the schema with args, on a free port of
// the loopback interface, and returns once it printed its URL.
func serve(t *testing.T, d *db, env cli.Env, args ...string) *served {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	s := &served{stdout: newLines(), stderr: newLines()}
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, d.args(append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...), s.stdout, s.stderr, env)
	}()
	var once sync.Once
	var code int
	s.stop = func() int {
		once.Do(func() {
			cancel()
			select {
			case code = <-done:
			case <-time.After(waitTimeout):
				t.Fatalf("serve did not stop %s after its context was cancelled", waitTimeout)
			}
		})
		return code
	}
	t.Cleanup(func() { s.stop() })
	deadline := time.After(waitTimeout)
	for s.url == "" {
		select {
		case <-s.stdout.c:
			if m := servingURL.FindStringSubmatch(s.stdout.String()); m != nil {
				s.url = m[1]
			}
		case code := <-done:
			t.Fatalf("serve exited with %d before it listened; stderr:\n%s", code, s.stderr)
		case <-deadline:
			t.Fatalf("serve printed no URL within %s; stdout:\n%s", waitTimeout, s.stdout)
		}
	}
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	s.client = &http.Client{
		Jar: jar, Transport: tr, Timeout: waitTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return s
}

// get fetches the page at path (relative to the URL) and returns its
// status and body.
func (s *served) get(t *testing.T, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.url+path, nil)
	require.NoError(t, err)
	return s.do(t, req)
}

// post posts form to path as the page's own form would, or from origin
// when set.
func (s *served) post(t *testing.T, path string, form url.Values, origin string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.url+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", strings.TrimSuffix(s.url, "/"))
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	if origin != "" {
		req.Header.Set("Origin", origin)
		req.Header.Set("Sec-Fetch-Site", "cross-site")
	}
	res, err := s.client.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	return res, string(body)
}

func (s *served) do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	res, err := s.client.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	return res.StatusCode, string(body)
}

const testToken = "s3cret-token-of-the-tests"

// TestServe serves the page with a token from the environment: read-only
// until a browser signs in with the token, then its requeue requeues; it
// stops with exit 0 when its context is cancelled.
func TestServe(t *testing.T) {
	t.Parallel()

	d := migratedDB(t)
	b := d.backend(t)
	dls := deadLetters(t, b)
	env := cli.Env{Getenv: func(key string) string {
		if key == cli.EnvToken {
			return testToken
		}
		return ""
	}}
	s := serve(t, d, env)
	require.Contains(t, s.stdout.String(), "sign in at "+s.url+"login to act")

	code, body := s.get(t, "")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<tr data-perspective="order_summary"`)
	require.Contains(t, body, "Vantage · "+d.schema)
	require.Contains(t, body, `<a href="login" id="sign-in">Sign in</a>`)
	require.NotContains(t, body, `method="post"`, "read-only before signing in")
	requeue := url.Values{"id": {dls[0].ID.String()}}
	res, body := s.post(t, "requeue", requeue, "")
	require.Equal(t, http.StatusForbidden, res.StatusCode, body)

	code, body = s.get(t, "login")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<input type="password" name="token"`)
	code, _ = s.get(t, "assets/style.css")
	require.Equal(t, http.StatusOK, code, "the login form's stylesheet")

	res, body = s.post(t, "login", url.Values{"token": {"s3cret-token-of-the-test"}}, "")
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	require.Contains(t, body, "Wrong token.")
	require.Empty(t, res.Cookies())
	res, _ = s.post(t, "login", url.Values{"token": {testToken}}, "https://attacker.example")
	require.Equal(t, http.StatusForbidden, res.StatusCode, "a sign-in from another site is refused")
	require.Empty(t, res.Cookies())

	res, _ = s.post(t, "login", url.Values{"token": {testToken}}, "")
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "./", res.Header.Get("Location"))
	require.Len(t, res.Cookies(), 1)
	cookie := res.Cookies()[0]
	require.Equal(t, "vantage_session", cookie.Name)
	require.True(t, cookie.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, cookie.SameSite)
	require.NotContains(t, cookie.Value, testToken, "the cookie is a session, not the token")

	_, body = s.get(t, "")
	require.Contains(t, body, `action="requeue-all"`, "signed in, the page offers its actions")
	res, body = s.post(t, "requeue", requeue, "https://attacker.example")
	require.Equal(t, http.StatusForbidden, res.StatusCode, "signed in, a cross-origin action is still refused")
	require.Contains(t, body, "Cross-origin request refused")
	res, _ = s.post(t, "requeue", requeue, "")
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	dl, err := b.Admin.DeadLetterGet(t.Context(), &ports.DeadLetterGetParams{ID: dls[0].ID})
	require.NoError(t, err)
	require.Equal(t, ports.DeadLetterRequeued, dl.Status)

	res, _ = s.post(t, "login", url.Values{"sign_out": {"yes"}}, "")
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	_, body = s.get(t, "")
	require.NotContains(t, body, `method="post"`, "signed out, read-only again")

	require.Equal(t, cli.ExitOK, s.stop())
	logs := s.stderr.String()
	require.Contains(t, logs, "sign-in refused: wrong token")
	require.Contains(t, logs, `msg="dead letter requeued"`)
	require.Contains(t, logs, `actor="vantage serve, 127.0.0.1:`)
	require.NotContains(t, logs, testToken)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.url, nil)
	require.NoError(t, err)
	_, err = s.client.Do(req)
	require.Error(t, err, "stopped, it no longer listens")
}

// TestServeReadOnly serves the page without a token: read-only for
// everyone, with no sign-in form.
func TestServeReadOnly(t *testing.T) {
	t.Parallel()

	d := migratedDB(t)
	b := d.backend(t)
	dls := deadLetters(t, b)
	d.env.Now = func() time.Time { return dls[1].DeadLetteredAt.Add(90 * time.Second) }
	s := serve(t, d, d.env, "--json")
	require.JSONEq(t, `{"url": "`+s.url+`", "schema": "`+d.schema+`", "read_only": true}`, s.stdout.String())

	code, body := s.get(t, "dead-letters")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, ">1m 30s ago</time>", "ages on Env.Now")
	require.NotContains(t, body, `method="post"`)
	require.NotContains(t, body, "Sign in")
	res, _ := s.post(t, "requeue", url.Values{"id": {dls[0].ID.String()}}, "")
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	code, _ = s.get(t, "login")
	require.Equal(t, http.StatusNotFound, code, "no token, no sign-in")
	dl, err := b.Admin.DeadLetterGet(t.Context(), &ports.DeadLetterGetParams{ID: dls[0].ID})
	require.NoError(t, err)
	require.Equal(t, ports.DeadLetterDead, dl.Status)
	require.Equal(t, cli.ExitOK, s.stop())
}

// TestServeBadInput checks the command lines serve refuses, before it
// listens.
func TestServeBadInput(t *testing.T) {
	t.Parallel()

	d := migratedDB(t)
	busy, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { busy.Close() })
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"ShortToken", []string{"serve", "--token", "hunter2"}, cli.ExitUsage, "--token must be at least 16 characters, got 7"},
		{"ExtraArgument", []string{"serve", "now"}, cli.ExitUsage, `unknown command "now" for "vantage serve"`},
		{"BadAddress", []string{"serve", "--addr", "127.0.0.1:99999"}, cli.ExitFailed, "listening on 127.0.0.1:99999"},
		{"AddressInUse", []string{"serve", "--addr", busy.Addr().String()}, cli.ExitFailed, "address already in use"},
	} {
		r := d.run(t, tc.args...)
		require.Equal(t, tc.code, r.code, tc.name)
		require.Contains(t, r.stderr, tc.msg, tc.name)
		require.Empty(t, r.stdout, tc.name)
	}
}
