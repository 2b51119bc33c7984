package statuspage_test

import (
	"context"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/internal/logtest"
	"github.com/vantage-go/vantage/ports"
	"github.com/vantage-go/vantage/statuspage"
)

// origin is where the tests' requests go: the page's own origin.
const origin = "http://status.example"

// operator is the actor of the authorized requests.
const operator = "ops@example.com"

// authorized returns options that authorize every request as operator.
func authorized() statuspage.Options {
	return statuspage.Options{
		AuthorizeFunc: func(*http.Request) bool { return true },
		ActorFunc:     func(*http.Request) string { return operator },
	}
}

type testBundle struct {
	f      *fixture
	logs   *logtest.JSON
	client *client
}

// setup seeds a fresh backend and serves its page with opts, on the fixed
// clock and a captured logger.
func setup(t *testing.T, newBackend newBackendFunc, opts statuspage.Options) *testBundle {
	t.Helper()
	f := seed(t, newBackend(t))
	logger, logs := logtest.NewJSON(slog.LevelDebug)
	opts.Clock = fixedClock{}
	opts.Logger = logger
	h, err := statuspage.New(f.b, &opts)
	require.NoError(t, err)
	return &testBundle{f: f, logs: logs, client: newClient(t, h)}
}

// client sends requests to a handler as a browser on origin would: it
// keeps cookies, and its POSTs carry the headers of a same-origin form.
type client struct {
	t   *testing.T
	h   http.Handler
	jar http.CookieJar
}

func newClient(t *testing.T, h http.Handler) *client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &client{t: t, h: h, jar: jar}
}

// do serves one request for target (a path, or an absolute URL) and
// returns the response.
func (c *client) do(method, target string, form url.Values, header http.Header) *http.Response {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	if strings.HasPrefix(target, "/") {
		target = origin + target
	}
	req := httptest.NewRequestWithContext(c.t.Context(), method, target, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	for _, ck := range c.jar.Cookies(req.URL) {
		req.AddCookie(ck)
	}
	rec := httptest.NewRecorder()
	c.h.ServeHTTP(rec, req)
	res := rec.Result()
	res.Request = req
	c.jar.SetCookies(req.URL, res.Cookies())
	return res
}

func (c *client) get(target string) *http.Response {
	c.t.Helper()
	return c.do(http.MethodGet, target, nil, nil)
}

// sameOrigin are the headers a browser sends with a form posted by a page
// of origin.
var sameOrigin = http.Header{"Origin": {origin}, "Sec-Fetch-Site": {"same-origin"}}

func (c *client) post(target string, form url.Values) *http.Response {
	c.t.Helper()
	return c.do(http.MethodPost, target, form, sameOrigin)
}

// follow gets the page res redirects to.
func (c *client) follow(res *http.Response) *http.Response {
	c.t.Helper()
	require.Equal(c.t, http.StatusSeeOther, res.StatusCode, "an action redirects with 303")
	loc, err := res.Location()
	require.NoError(c.t, err)
	return c.get(loc.String())
}

func bodyOf(t *testing.T, res *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return string(b)
}

// page gets target, requires a 200 and returns the body.
func (c *client) page(target string) string {
	c.t.Helper()
	res := c.get(target)
	body := bodyOf(c.t, res)
	require.Equal(c.t, http.StatusOK, res.StatusCode, "GET %s:\n%s", target, body)
	return body
}

// row returns the HTML of the table row whose attribute attr is value.
func row(t *testing.T, body, attr, value string) string {
	t.Helper()
	start := strings.Index(body, "<tr "+attr+`="`+value+`"`)
	require.GreaterOrEqual(t, start, 0, "no row with %s=%q in:\n%s", attr, value, body)
	end := strings.Index(body[start:], "</tr>")
	require.Greater(t, end, 0)
	return body[start : start+end]
}

var tags = regexp.MustCompile(`<[^>]*>`)

// text returns the text of an HTML fragment: tags removed, entities
// decoded, spaces collapsed.
func text(fragment string) string {
	return strings.Join(strings.Fields(html.UnescapeString(tags.ReplaceAllString(fragment, " "))), " ")
}

// cell returns the text of the cell of row whose class list has class.
func cell(t *testing.T, row, class string) string {
	t.Helper()
	re := regexp.MustCompile(`<td class="(?:[^"]*\s)?` + regexp.QuoteMeta(class) + `(?:\s[^"]*)?">((?s).*?)</td>`)
	m := re.FindStringSubmatch(row)
	require.NotNil(t, m, "no cell of class %q in row:\n%s", class, row)
	return text(m[1])
}

// state is everything an action could change, as the ports read it.
type state struct {
	Perspectives []ports.PerspectiveStatus
	DeadLetters  []ports.DeadLetter
	Rebuilds     []ports.RebuildRequest
	Instances    []ports.Instance
}

func snapshot(t *testing.T, b ports.Backend) state {
	t.Helper()
	ctx := t.Context()
	var s state
	var err error
	s.Perspectives, err = b.Admin.PerspectivesStatus(ctx, &ports.PerspectivesStatusParams{Now: t0})
	require.NoError(t, err)
	s.DeadLetters, err = b.DeadLetters.DeadLettersList(ctx, &ports.DeadLettersListParams{})
	require.NoError(t, err)
	s.Rebuilds, err = b.Admin.RebuildsList(ctx, &ports.RebuildsListParams{})
	require.NoError(t, err)
	s.Instances, err = b.Admin.InstancesList(ctx)
	require.NoError(t, err)
	return s
}

func deadLetter(t *testing.T, b ports.Backend, id uuid.UUID) ports.DeadLetter {
	t.Helper()
	dl, err := b.Admin.DeadLetterGet(t.Context(), &ports.DeadLetterGetParams{ID: id})
	require.NoError(t, err)
	return dl
}

func perspective(t *testing.T, b ports.Backend, name string) ports.PerspectiveStatus {
	t.Helper()
	all, err := b.Admin.PerspectivesStatus(t.Context(), &ports.PerspectivesStatusParams{Now: t0})
	require.NoError(t, err)
	for _, s := range all {
		if s.Perspective == name {
			return s
		}
	}
	t.Fatalf("no perspective %q", name)
	return ports.PerspectiveStatus{}
}

// every action the page offers, with a form that would take effect on the
// fixture.
func everyAction(f *fixture) map[string]url.Values {
	id := f.deadLetter.ID.String()
	return map[string]url.Values{
		"requeue":     {"id": {id}},
		"ignore":      {"id": {id}},
		"requeue-all": {"perspective": {orderSummary}},
		"rebuild":     {"perspective": {orderSummary}},
		"retire":      {"perspective": {orderSummary}, "confirm": {"yes"}, "drop_state": {"yes"}},
		"revive":      {"perspective": {legacyTotals}},
	}
}

// pages are every page of the fixture.
func pages(f *fixture) []string {
	return []string{
		"/",
		"/dead-letters",
		"/dead-letters?perspective=" + orderSummary + "&status=all",
		"/dead-letter?id=" + f.deadLetter.ID.String(),
		"/perspective?name=" + orderSummary,
		"/perspective?name=" + legacyTotals,
	}
}

// TestStatusPage runs the page's tests on every backend.
func TestStatusPage(t *testing.T) {
	t.Parallel()

	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			testStatusPage(t, bk.new)
		})
	}
}

func testStatusPage(t *testing.T, newBackend newBackendFunc) {
	t.Helper()

	t.Run("ActionsForbiddenUnlessAuthorized", func(t *testing.T) {
		t.Parallel()

		for name, opts := range map[string]statuspage.Options{
			"ReadOnly":       {},
			"AuthorizeFalse": {AuthorizeFunc: func(*http.Request) bool { return false }},
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()

				b := setup(t, newBackend, opts)
				before := snapshot(t, b.f.b)
				for _, target := range pages(b.f) {
					body := b.client.page(target)
					require.NotContains(t, body, `method="post"`, "GET %s: a read-only page has no action", target)
					require.NotRegexp(t, `<button[^>]*class="(requeue|ignore|requeue-all|rebuild|revive)`, body, "GET %s", target)
					require.NotContains(t, body, `href="retire`, "GET %s", target)
					require.Contains(t, body, `id="mode" title="This page shows the state only; it changes nothing.">read-only`)
				}
				res := b.client.get("/retire?perspective=" + orderSummary)
				require.Equal(t, http.StatusForbidden, res.StatusCode, "the retire confirmation is an action's page")

				for action, form := range everyAction(b.f) {
					res := b.client.post("/"+action, form)
					body := bodyOf(t, res)
					require.Equal(t, http.StatusForbidden, res.StatusCode, "POST /%s: %s", action, body)
					require.Contains(t, body, "not authorized")
					require.Contains(t, body, "Nothing was changed.")
				}
				require.Equal(t, before, snapshot(t, b.f.b), "a refused action changes nothing")
				require.Len(t, logtest.WithMsg(b.logs.Lines(t), "unauthorized action refused"), len(everyAction(b.f)))
			})
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()

		b := setup(t, newBackend, authorized())
		before := snapshot(t, b.f.b)
		unknown := uuid.Must(uuid.NewV7()).String()
		for _, tc := range []struct {
			name, method, target string
			form                 url.Values
			code                 int
			msg                  string
		}{
			{"DeadLetterMalformedID", "GET", "/dead-letter?id=42", nil, 400, `Malformed dead letter id "42"`},
			{"DeadLetterNoID", "GET", "/dead-letter", nil, 400, "No dead letter id"},
			{"DeadLetterUnknown", "GET", "/dead-letter?id=" + unknown, nil, 404, "No dead letter has id " + unknown},
			{"DeadLettersBadStatus", "GET", "/dead-letters?status=lost", nil, 400, `Unknown status "lost"`},
			{"DeadLettersBadPage", "GET", "/dead-letters?after=yesterday", nil, 400, `Malformed page position "yesterday"`},
			{"PerspectiveUnknown", "GET", "/perspective?name=order_summary_v0", nil, 404, `No perspective is named "order_summary_v0"`},
			{"PerspectiveNoName", "GET", "/perspective", nil, 400, "No perspective"},
			{"RetireUnknown", "GET", "/retire?perspective=order_summary_v0", nil, 404, `No perspective is named "order_summary_v0"`},
			{"NoSuchPage", "GET", "/settings", nil, 404, "no page at this address"},
			{"RequeueMalformedID", "POST", "/requeue", url.Values{"id": {"0197a3c4-zzzz"}}, 400, "Malformed dead letter id"},
			{"RequeueNoID", "POST", "/requeue", url.Values{}, 400, "No dead letter id"},
			{"RequeueUnknown", "POST", "/requeue", url.Values{"id": {unknown}}, 404, "No dead letter has id " + unknown},
			{"IgnoreUnknown", "POST", "/ignore", url.Values{"id": {unknown}}, 404, "No dead letter has id " + unknown},
			{"RequeueAllUnknown", "POST", "/requeue-all", url.Values{"perspective": {"order_summary_v0"}}, 404, `No perspective is named "order_summary_v0"`},
			{"RequeueAllNoPerspective", "POST", "/requeue-all", url.Values{}, 400, "No perspective"},
			{"RebuildUnknown", "POST", "/rebuild", url.Values{"perspective": {"order_summary_v0"}}, 404, `No perspective is named "order_summary_v0"`},
			{"RebuildRetired", "POST", "/rebuild", url.Values{"perspective": {legacyTotals}}, 409, "is retired"},
			{"RetireUnknown", "POST", "/retire", url.Values{"perspective": {"order_summary_v0"}, "confirm": {"yes"}}, 404, `No perspective is named "order_summary_v0"`},
			{"ReviveUnknown", "POST", "/revive", url.Values{"perspective": {"order_summary_v0"}}, 404, `No perspective is named "order_summary_v0"`},
		} {
			var res *http.Response
			if tc.method == http.MethodPost {
				res = b.client.post(tc.target, tc.form)
			} else {
				res = b.client.get(tc.target)
			}
			body := bodyOf(t, res)
			require.Equal(t, tc.code, res.StatusCode, "%s: %s", tc.name, body)
			require.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"), tc.name)
			require.Contains(t, text(body), tc.msg, tc.name)
			if tc.method == http.MethodPost {
				require.Contains(t, body, "Nothing was changed.", tc.name)
			}
		}
		require.Equal(t, before, snapshot(t, b.f.b), "bad input changes nothing")
	})

	t.Run("CrossOriginActionsRefused", func(t *testing.T) {
		t.Parallel()

		b := setup(t, newBackend, authorized())
		before := snapshot(t, b.f.b)
		for name, header := range map[string]http.Header{
			"SecFetchSiteCrossSite": {"Sec-Fetch-Site": {"cross-site"}, "Origin": {"https://attacker.example"}},
			"SecFetchSiteSameSite":  {"Sec-Fetch-Site": {"same-site"}, "Origin": {"https://other.status.example"}},
			"OriginOfAnotherHost":   {"Origin": {"https://attacker.example"}},
		} {
			for action, form := range everyAction(b.f) {
				res := b.client.do(http.MethodPost, "/"+action, form, header)
				body := bodyOf(t, res)
				require.Equal(t, http.StatusForbidden, res.StatusCode, "%s: POST /%s: %s", name, action, body)
				require.Contains(t, body, "Cross-origin request refused", name)
				require.Contains(t, body, "Nothing was changed.", name)
			}
		}
		require.Equal(t, before, snapshot(t, b.f.b), "a cross-origin action changes nothing")
		require.Len(t, logtest.WithMsg(b.logs.Lines(t), "cross-origin request refused"), 3*len(everyAction(b.f)))
	})

	t.Run("DeadLetterPage", func(t *testing.T) {
		t.Parallel()

		b := setup(t, newBackend, authorized())
		body := b.client.page("/dead-letter?id=" + b.f.deadLetter.ID.String())
		m := regexp.MustCompile(`<pre class="error" id="error">((?s).*?)</pre>`).FindStringSubmatch(body)
		require.NotNil(t, m)
		require.Equal(t, gatewayError, html.UnescapeString(m[1]), "the error in full")
		require.NotContains(t, m[1], "<amount", "escaped")
		for _, want := range []string{
			b.f.deadLetter.ID.String(), b.f.s1.String(), b.f.deadLetter.EventID.String(), b.f.deadLetter.WorkID.String(), b.f.a.String(),
			"version 2", "v42", `<time datetime="2026-03-01T11:55:00Z" title="2026-03-01T11:55:00Z">5m ago</time>`,
		} {
			require.Contains(t, body, want)
		}
		require.Contains(t, text(body), "Reason failed Attempts 10")
		require.Contains(t, body, `action="requeue"`)
		require.Contains(t, body, `action="ignore"`)
	})

	t.Run("DeadLettersPaging", func(t *testing.T) {
		t.Parallel()

		opts := authorized()
		opts.PageSize = 2
		b := setup(t, newBackend, opts)
		dls := deadLetters(t, b.f.b, 4) // an hour ago and after; the fixture's is newer
		want := []uuid.UUID{b.f.deadLetter.ID, dls[3].ID, dls[2].ID, dls[1].ID, dls[0].ID}
		var got []uuid.UUID
		target := "/dead-letters"
		for pages := 0; target != ""; pages++ {
			require.Less(t, pages, 3, "5 dead letters take 3 pages of 2")
			body := b.client.page(target)
			for _, m := range regexp.MustCompile(`<tr data-id="([^"]+)"`).FindAllStringSubmatch(body, -1) {
				got = append(got, uuid.MustParse(m[1]))
			}
			require.Equal(t, pages > 0, strings.Contains(body, `id="newest"`), "a later page links to the newest")
			target = ""
			if m := regexp.MustCompile(`<a href="([^"]+)" id="older">`).FindStringSubmatch(body); m != nil {
				target = "/" + html.UnescapeString(m[1])
			}
		}
		require.Equal(t, want, got, "newest first, each once")
	})

	t.Run("Ignore", func(t *testing.T) {
		t.Parallel()

		b := setup(t, newBackend, authorized())
		res := b.client.post("/ignore", url.Values{"id": {b.f.deadLetter.ID.String()}, "back": {"./dead-letters"}})
		require.Equal(t, "./dead-letters", res.Header.Get("Location"))
		body := bodyOf(t, b.client.follow(res))
		require.Contains(t, body, "Ignored dead letter "+b.f.deadLetter.ID.String())
		require.Equal(t, ports.DeadLetterIgnored, deadLetter(t, b.f.b, b.f.deadLetter.ID).Status)
		require.Contains(t, b.client.page("/dead-letters?status=ignored"), b.f.deadLetter.ID.String())
	})

	t.Run("Overview", func(t *testing.T) {
		t.Parallel()

		b := setup(t, newBackend, authorized())
		body := b.client.page("/")
		for _, tc := range []struct {
			perspective string
			cells       map[string]string
		}{
			{orderSummary, map[string]string{
				"streams": "2", "caught-up": "0", "behind": "2", "failed": "1", "rewinds": "0",
				"pending": "2", "lag": "10m", "retrying": "1", "dead-letters": "1",
			}},
			{customerStats, map[string]string{
				"streams": "1", "caught-up": "1", "behind": "1", "failed": "0", "rewinds": "0",
				"pending": "1", "lag": "10m", "retrying": "0", "dead-letters": "0",
			}},
			{legacyTotals, map[string]string{"name": "legacy_totals retired", "pending": "0", "lag": "–"}},
		} {
			r := row(t, body, "data-perspective", tc.perspective)
			for class, want := range tc.cells {
				require.Equal(t, want, cell(t, r, class), "%s: %s", tc.perspective, class)
			}
		}
		require.Contains(t, row(t, body, "data-perspective", orderSummary), `href="dead-letters?perspective=order_summary"`)
		require.Contains(t, row(t, body, "data-perspective", orderSummary), `<button type="submit" class="requeue-all">Requeue 1</button>`)
		require.NotContains(t, row(t, body, "data-perspective", legacyTotals), "Rebuild", "a retired perspective is not rebuilt")

		a := row(t, body, "data-id", b.f.a.String())
		require.Contains(t, a, "orders-7d9f-abc")
		require.Equal(t, "12s ago", cell(t, a, "heartbeat"))
		require.Contains(t, a, `title="2026-03-01T11:59:48Z"`, "the absolute time in the title")
		require.Equal(t, "live", cell(t, a, "live"))
		require.Equal(t, "2", cell(t, a, "leased"))
		silent := row(t, body, "data-id", b.f.bInst.String())
		require.Equal(t, "2m ago", cell(t, silent, "heartbeat"))
		require.Equal(t, "silent", cell(t, silent, "live"))

		running := row(t, body, "data-id", b.f.running.ID.String())
		require.Equal(t, "40% 4 / 10 streams", cell(t, running, "progress"), "the progress bar's text, then the figures")
		require.Contains(t, running, `<progress max="10" value="4">40%</progress>`)
		require.Equal(t, "3m", cell(t, running, "eta"), "2 minutes for 4 streams: 3 for the 6 left")
		require.Contains(t, running, "ops@example.com")
		failed := row(t, body, "data-id", b.f.failed.ID.String())
		require.Contains(t, failed, "status-failed")
		require.Contains(t, body, "payment gateway unreachable</pre>", "a failed rebuild shows its error")
		require.Less(t, strings.Index(body, running), strings.Index(body, `id="rebuilds-recent"`), "running is listed as active")
		require.Greater(t, strings.Index(body, failed), strings.Index(body, `id="rebuilds-recent"`), "failed is listed as recent")

		require.Equal(t, "3", text(regexp.MustCompile(`id="total-perspectives">([^<]*)<`).FindStringSubmatch(body)[1]))
		require.Equal(t, "1 / 2", text(regexp.MustCompile(`id="total-live">([^<]*)<`).FindStringSubmatch(body)[1]))
		require.Contains(t, body, `<span class="badge ok" id="mode"`)
	})

	t.Run("PerspectivePage", func(t *testing.T) {
		t.Parallel()

		b := setup(t, newBackend, authorized())
		body := b.client.page("/perspective?name=" + orderSummary)
		figures := text(body[strings.Index(body, `<dl class="fields" id="figures">`):])
		require.Contains(t, body, "<code>order_placed</code>, <code>payment_failed</code>")
		require.Contains(t, figures, "Streams 2 Caught up 0 Behind 2 streams with pending events Failed 1")
		require.Contains(t, figures, "Pending 2 events, the oldest waiting 10m")
		require.Contains(t, body, `<tr data-id="`+b.f.deadLetter.ID.String()+`"`)
		require.Contains(t, body, `<tr data-id="`+b.f.failed.ID.String()+`"`)
		require.Contains(t, body, `href="retire?perspective=order_summary"`)

		retired := b.client.page("/perspective?name=" + legacyTotals)
		require.Contains(t, retired, "Retired: appends create no work for it.")
		require.Contains(t, retired, `action="revive"`)
		require.NotContains(t, retired, `action="rebuild"`)
	})

	t.Run("Rebuild", func(t *testing.T) {
		t.Parallel()

		b := setup(t, newBackend, authorized())
		res := b.client.post("/rebuild", url.Values{"perspective": {orderSummary}, "back": {"./"}})
		require.Equal(t, "./", res.Header.Get("Location"))
		body := bodyOf(t, b.client.follow(res))
		pending, err := b.f.b.Admin.RebuildsList(t.Context(), &ports.RebuildsListParams{Perspective: orderSummary, Status: ports.RebuildPending})
		require.NoError(t, err)
		require.Len(t, pending, 1)
		require.Equal(t, operator, pending[0].RequestedBy, "recorded as requested by the actor")
		require.Contains(t, body, "Requested a rebuild of order_summary (request "+pending[0].ID.String()+")")
		require.Contains(t, body, `<tr data-id="`+pending[0].ID.String()+`"`)
		require.Len(t, logtest.WithMsg(b.logs.Lines(t), "rebuild requested"), 1)
	})

	t.Run("Requeue", func(t *testing.T) {
		t.Parallel()

		b := setup(t, newBackend, authorized())
		id := b.f.deadLetter.ID.String()
		res := b.client.post("/requeue", url.Values{"id": {id}, "back": {"./dead-letters?perspective=order_summary"}})
		require.Equal(t, "./dead-letters?perspective=order_summary", res.Header.Get("Location"), "back to the page of the form")
		body := bodyOf(t, b.client.follow(res))
		require.Contains(t, body, `<p class="flash" id="flash" role="status">Requeued dead letter `+id+": its event is pending again.</p>")
		require.Contains(t, body, "No dead letters.", "it waits no more")
		require.NotContains(t, b.client.page("/"), `id="flash"`, "a flash shows once")

		dl := deadLetter(t, b.f.b, b.f.deadLetter.ID)
		require.Equal(t, ports.DeadLetterRequeued, dl.Status)
		require.Equal(t, 1, dl.Requeues)
		s := perspective(t, b.f.b, orderSummary)
		require.Equal(t, int64(0), s.DeadLetters)
		require.Equal(t, int64(3), s.Pending, "its work row is pending again")
		lines := logtest.WithMsg(b.logs.Lines(t), "dead letter requeued")
		require.Len(t, lines, 1)
		require.Equal(t, id, lines[0]["dead_letter_id"])
		require.Equal(t, operator, lines[0]["actor"])

		res = b.client.post("/requeue", url.Values{"id": {id}})
		again := bodyOf(t, res)
		require.Equal(t, http.StatusConflict, res.StatusCode, again)
		require.Contains(t, again, "is requeued or recovered already")
		require.Contains(t, again, "Nothing was changed.")
		require.Equal(t, 1, deadLetter(t, b.f.b, b.f.deadLetter.ID).Requeues)
	})

	t.Run("RequeueAll", func(t *testing.T) {
		t.Parallel()

		b := setup(t, newBackend, authorized())
		deadLetters(t, b.f.b, 3)
		require.Contains(t, b.client.page("/dead-letters?perspective=order_summary"), "Requeue every waiting dead letter of order_summary")
		res := b.client.post("/requeue-all", url.Values{"perspective": {orderSummary}})
		require.Equal(t, "./dead-letters?perspective=order_summary", res.Header.Get("Location"), "without a back, the perspective's dead letters")
		require.Contains(t, bodyOf(t, b.client.follow(res)), "Requeued 4 dead letters of order_summary")
		require.Equal(t, int64(0), perspective(t, b.f.b, orderSummary).DeadLetters)

		res = b.client.post("/requeue-all", url.Values{"perspective": {orderSummary}})
		require.Contains(t, bodyOf(t, b.client.follow(res)), "No dead letter of order_summary was waiting: nothing was requeued.")
	})

	t.Run("Retire", func(t *testing.T) {
		t.Parallel()

		b := setup(t, newBackend, authorized())
		before := snapshot(t, b.f.b)
		res := b.client.post("/retire", url.Values{"perspective": {orderSummary}})
		require.Equal(t, http.StatusSeeOther, res.StatusCode)
		require.Equal(t, "./retire?perspective=order_summary", res.Header.Get("Location"), "unconfirmed, to the confirmation")
		require.Equal(t, before, snapshot(t, b.f.b), "an unconfirmed retire changes nothing")

		confirm := bodyOf(t, b.client.follow(res))
		require.Contains(t, confirm, `<input type="hidden" name="confirm" value="yes">`)
		require.Contains(t, confirm, `name="drop_state" value="yes"`)
		res = b.client.post("/retire", url.Values{"perspective": {orderSummary}, "confirm": {"yes"}, "drop_state": {"yes"}, "back": {"./perspective?name=order_summary"}})
		body := bodyOf(t, b.client.follow(res))
		require.Contains(t, body, "Retired order_summary: deleted 2 subscriptions and 2 pending work rows, 2 cursors, 0 models and 0 snapshots.")
		require.Contains(t, body, "Retired: appends create no work for it.")
		s := perspective(t, b.f.b, orderSummary)
		require.True(t, s.Retired)
		require.Equal(t, int64(0), s.Pending)
		require.Equal(t, int64(1), s.DeadLetters, "its dead letters stay")
	})

	t.Run("Revive", func(t *testing.T) {
		t.Parallel()

		b := setup(t, newBackend, authorized())
		res := b.client.post("/revive", url.Values{"perspective": {legacyTotals}, "back": {"./perspective?name=legacy_totals"}})
		require.Equal(t, "./", res.Header.Get("Location"), "to the overview: revived, the perspective may be known no more")
		require.Contains(t, bodyOf(t, b.client.follow(res)), "Revived legacy_totals")
		retired, err := b.f.b.Admin.PerspectivesRetired(t.Context())
		require.NoError(t, err)
		require.Empty(t, retired)
		// revived, it has nothing left to be known by
		require.Equal(t, http.StatusNotFound, b.client.get("/perspective?name="+legacyTotals).StatusCode)
	})
}

// failingAdmin is an Admin whose every call fails as a database that went
// away would.
type failingAdmin struct{ ports.Admin }

var errDown = &downError{}

type downError struct{}

func (*downError) Error() string {
	return "connecting to 10.0.0.5:5432: dial tcp 10.0.0.5:5432: connect: connection refused"
}

func (failingAdmin) PerspectivesStatus(context.Context, *ports.PerspectivesStatusParams) ([]ports.PerspectiveStatus, error) {
	return nil, errDown
}

func (failingAdmin) DeadLetterGet(context.Context, *ports.DeadLetterGetParams) (ports.DeadLetter, error) {
	return ports.DeadLetter{}, errDown
}

func (failingAdmin) DeadLetterRequeue(context.Context, *ports.DeadLetterRequeueParams) error {
	return errDown
}

// TestBackendError checks that a backend error gets the 500 page, with
// the error, and is logged.
func TestBackendError(t *testing.T) {
	t.Parallel()

	b := newMemory(t)
	b.Admin = failingAdmin{b.Admin}
	logger, logs := logtest.NewJSON(slog.LevelDebug)
	opts := authorized()
	opts.Logger = logger
	h, err := statuspage.New(b, &opts)
	require.NoError(t, err)
	c := newClient(t, h)
	id := uuid.Must(uuid.NewV7()).String()

	for _, tc := range []struct {
		method, target string
		form           url.Values
		msg            string
	}{
		{"GET", "/", nil, "Reading the perspectives' status: " + errDown.Error()},
		{"GET", "/dead-letter?id=" + id, nil, "Reading dead letter " + id + ": " + errDown.Error()},
		{"POST", "/requeue", url.Values{"id": {id}}, "Requeueing dead letter " + id + ": " + errDown.Error()},
	} {
		var res *http.Response
		if tc.method == http.MethodPost {
			res = c.post(tc.target, tc.form)
		} else {
			res = c.get(tc.target)
		}
		body := bodyOf(t, res)
		require.Equal(t, http.StatusInternalServerError, res.StatusCode, body)
		require.Contains(t, text(body), tc.msg)
		require.Equal(t, tc.method == http.MethodPost, strings.Contains(body, "may or may not have taken effect"))
	}
	lines := logs.Lines(t)
	for _, msg := range []string{"reading the perspectives' status failed", "reading dead letter " + id + " failed", "requeueing dead letter " + id + " failed"} {
		l := logtest.WithMsg(lines, msg)
		require.Len(t, l, 1, msg)
		require.Equal(t, "ERROR", l[0].Level())
		require.Equal(t, errDown.Error(), l[0]["error"])
		require.Equal(t, "statuspage", l[0]["component"])
	}
}

// TestMountedUnderPrefix serves the page under a prefix, as an
// application mounts it, and follows its links, stylesheet and redirects.
func TestMountedUnderPrefix(t *testing.T) {
	t.Parallel()

	f := seed(t, newMemory(t))
	opts := authorized()
	opts.Clock = fixedClock{}
	opts.Logger = slog.New(slog.DiscardHandler)
	page, err := statuspage.New(f.b, &opts)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/ops/vantage/", http.StripPrefix("/ops/vantage", page))
	mux.Handle("/ops/trailing/", http.StripPrefix("/ops/trailing/", page))
	mux.Handle("/ops/bare", http.StripPrefix("/ops/bare", page))
	c := newClient(t, mux)

	for _, root := range []string{"/ops/vantage/", "/ops/trailing/"} {
		base, err := url.Parse(origin + root)
		require.NoError(t, err)
		body := c.page(root)
		links := regexp.MustCompile(`(?:href|action)="([^"]*)"`).FindAllStringSubmatch(body, -1)
		require.NotEmpty(t, links)
		for _, m := range links {
			link := html.UnescapeString(m[1])
			require.False(t, strings.HasPrefix(link, "/"), "link %q is relative", link)
			target := base.ResolveReference(&url.URL{Path: strings.Split(link, "?")[0]})
			require.True(t, strings.HasPrefix(target.Path, root), "%q resolves under %s, to %s", link, root, target)
		}
		res := c.get(base.ResolveReference(&url.URL{Path: "assets/style.css"}).String())
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.Contains(t, res.Header.Get("Content-Type"), "text/css")
		c.page(root + "perspective?name=order_summary")
		c.page(root + "dead-letter?id=" + f.deadLetter.ID.String())

		res = c.post(root+"rebuild", url.Values{"perspective": {customerStats}, "back": {"./perspective?name=customer_stats"}})
		loc, err := res.Location()
		require.NoError(t, err)
		require.Equal(t, root+"perspective", loc.Path, "the redirect stays under the prefix")
		require.Contains(t, bodyOf(t, c.follow(res)), "Requested a rebuild of customer_stats")
	}

	res := c.get("/ops/bare?status=all")
	require.Equal(t, http.StatusMovedPermanently, res.StatusCode)
	loc, err := res.Location()
	require.NoError(t, err)
	require.Equal(t, "/ops/bare/?status=all", loc.RequestURI(), "the root gets its slash, so relative links resolve under it")

	res = c.get("/ops/vantage/no/such/page")
	body := bodyOf(t, res)
	require.Equal(t, http.StatusNotFound, res.StatusCode)
	require.Contains(t, body, `href="../../assets/style.css"`, "a page below the root climbs back to it")
}

// TestActionsArePostOnly checks that an action answers another method with
// 405, and changes nothing.
func TestActionsArePostOnly(t *testing.T) {
	t.Parallel()

	f := seed(t, newMemory(t))
	opts := authorized()
	h, err := statuspage.New(f.b, &opts)
	require.NoError(t, err)
	c := newClient(t, h)
	before := snapshot(t, f.b)
	for action := range everyAction(f) {
		if action == "retire" {
			continue // GET retire is its confirmation page
		}
		res := c.get("/" + action + "?id=" + f.deadLetter.ID.String() + "&perspective=" + orderSummary)
		require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode, action)
		require.Equal(t, http.MethodPost, res.Header.Get("Allow"))
	}
	res := c.do(http.MethodPut, "/retire", url.Values{"perspective": {orderSummary}, "confirm": {"yes"}}, sameOrigin)
	require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode)
	require.Equal(t, before, snapshot(t, f.b))
}

// TestSecurityHeaders checks the headers of every response: no framing
// (clickjacking), no script, no caching, no sniffing.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()

	f := seed(t, newMemory(t))
	h, err := statuspage.New(f.b, nil)
	require.NoError(t, err)
	c := newClient(t, h)
	for _, target := range append(pages(f), "/nowhere", "/assets/style.css") {
		res := c.get(target)
		require.Equal(t, "DENY", res.Header.Get("X-Frame-Options"), target)
		require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"), target)
		csp := res.Header.Get("Content-Security-Policy")
		require.Contains(t, csp, "frame-ancestors 'none'", target)
		require.Contains(t, csp, "default-src 'none'", target)
		require.Contains(t, csp, "form-action 'self'", target)
		if !strings.HasPrefix(target, "/assets/") {
			require.Equal(t, "no-store", res.Header.Get("Cache-Control"), target)
		}
	}
}

// TestBackStaysOnThePage checks that the page an action goes back to is
// one of the status page's: a forged back cannot redirect elsewhere.
func TestBackStaysOnThePage(t *testing.T) {
	t.Parallel()

	f := seed(t, newMemory(t))
	opts := authorized()
	h, err := statuspage.New(f.b, &opts)
	require.NoError(t, err)
	c := newClient(t, h)
	for _, back := range []string{
		"https://attacker.example/", "//attacker.example/", "./\\attacker.example", ".//attacker.example",
		"./../admin", "/dead-letters", "javascript:alert(1)", "./dead-letters#x", "",
	} {
		res := c.post("/rebuild", url.Values{"perspective": {customerStats}, "back": {back}})
		require.Equal(t, "./perspective?name=customer_stats", res.Header.Get("Location"), "back %q", back)
	}
}

// TestNew checks that New names every missing port and bad option.
func TestNew(t *testing.T) {
	t.Parallel()

	_, err := statuspage.New(ports.Backend{}, &statuspage.Options{PageSize: statuspage.PageSizeMax + 1, LiveWithin: -time.Second})
	require.Error(t, err)
	for _, want := range []string{"ports.Backend.Admin is nil", "ports.Backend.DeadLetters is nil", "Options.PageSize must be between 0 and 500, got 501", "Options.LiveWithin must not be negative"} {
		require.ErrorContains(t, err, want)
	}
	h, err := statuspage.New(newMemory(t), nil)
	require.NoError(t, err)
	require.NotNil(t, h)
}
