package statuspage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// recentRebuilds is how many finished rebuild requests a page lists.
const recentRebuilds = 10

// perspectiveDeadLetters is how many dead letters the page of a
// perspective lists; the dead-letters page pages through the rest.
const perspectiveDeadLetters = 10

// layoutFor returns the layout of a page for r, taking the flash message
// the previous action left, if any.
func (p *page) layoutFor(w http.ResponseWriter, r *http.Request, heading, nav, back string, now time.Time) layout {
	return layout{
		Site:      p.title,
		Heading:   heading,
		Nav:       nav,
		CanAct:    p.authorized(r),
		SignInURL: p.signInURL,
		Flash:     takeFlash(w, r),
		Clock:     clockText(now),
		Back:      "./" + back,
	}
}

// render writes page name with data and status code.
func (p *page) render(w http.ResponseWriter, r *http.Request, code int, name string, data any) {
	body, err := views.execute(name, data)
	if err != nil {
		p.log.ErrorContext(r.Context(), "rendering page failed", slog.String("page", name), slog.Any("error", err))
		http.Error(w, "rendering the page failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(body) // the client went away: nobody to tell
}

// errorView is the page of a request that failed.
type errorView struct {
	layout
	Code    int
	Status  string
	Message string
	// Unchanged is set for an action refused before it reached the
	// backend or refused by it; Unknown for an action the backend failed,
	// which may or may not have taken effect.
	Unchanged bool
	Unknown   bool
}

// fail renders the error page: code, a heading and a message that says
// what went wrong and what was (not) changed.
func (p *page) fail(w http.ResponseWriter, r *http.Request, code int, heading, message string) {
	now, _ := p.now()
	back := "./"
	if r.PostForm != nil { // an action's parsed form: go back where it came from
		back = backOr(r.PostForm.Get("back"), back)
	}
	// The page may answer a path below the root (a page not found): its
	// links climb back to the root.
	root := strings.Repeat("../", max(0, strings.Count(r.URL.EscapedPath(), "/")-1))
	v := errorView{
		layout: layout{
			Site: p.title, Heading: heading, CanAct: p.authorized(r), SignInURL: p.signInURL,
			Clock: clockText(now), Back: root + back, Root: root,
		},
		Code:      code,
		Status:    http.StatusText(code),
		Message:   message,
		Unchanged: r.Method == http.MethodPost && code < http.StatusInternalServerError,
		Unknown:   r.Method == http.MethodPost && code >= http.StatusInternalServerError,
	}
	p.render(w, r, code, tmplError, v)
}

// failBackend renders the page of a backend error met while doing what
// doing says: the ports' sentinels get their status (not found 404, a
// status that forbids the action 409, an invalid argument 400), anything
// else is logged and gets 500.
func (p *page) failBackend(w http.ResponseWriter, r *http.Request, err error, doing string) {
	msg := fmt.Sprintf("%s: %v", upperFirst(doing), err)
	switch {
	case errors.Is(err, ports.ErrNotFound):
		p.fail(w, r, http.StatusNotFound, "Not found", msg+".")
	case errors.Is(err, ports.ErrVersionConflict):
		p.fail(w, r, http.StatusConflict, "Not possible in its current state", msg+".")
	case errors.Is(err, ports.ErrInvalidArgument):
		p.fail(w, r, http.StatusBadRequest, "Bad request", msg+".")
	case r.Context().Err() != nil && errors.Is(err, r.Context().Err()):
		// The client went away: nobody reads the page, and nothing is
		// wrong with the backend.
		p.log.DebugContext(r.Context(), doing+" cancelled", slog.Any("error", err))
	default:
		p.log.ErrorContext(r.Context(), doing+" failed", slog.Any("error", err), slog.String("path", r.URL.Path))
		p.fail(w, r, http.StatusInternalServerError, "Backend error", msg)
	}
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// badRequest renders the 400 page of malformed input.
func (p *page) badRequest(w http.ResponseWriter, r *http.Request, message string) {
	p.fail(w, r, http.StatusBadRequest, "Bad request", message)
}

// overviewView is the overview page.
type overviewView struct {
	layout
	Perspectives   []perspectiveRow
	Pending        int64
	DeadLetters    int64
	Instances      []instanceRow
	LiveInstances  int
	LiveWithin     string
	ActiveRebuilds []rebuildRow
	RecentRebuilds []rebuildRow
}

func (p *page) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	now, backendNow := p.now()
	statuses, err := p.admin.PerspectivesStatus(ctx, &ports.PerspectivesStatusParams{Now: backendNow})
	if err != nil {
		p.failBackend(w, r, err, "reading the perspectives' status")
		return
	}
	instances, err := p.admin.InstancesList(ctx)
	if err != nil {
		p.failBackend(w, r, err, "listing the instances")
		return
	}
	active, recent, err := p.rebuilds(ctx, "")
	if err != nil {
		p.failBackend(w, r, err, "listing the rebuild requests")
		return
	}
	v := overviewView{
		layout:         p.layoutFor(w, r, "Overview", "overview", pathOverview, now),
		LiveWithin:     age(p.liveWithin),
		ActiveRebuilds: viewRebuilds(active, now),
		RecentRebuilds: viewRebuilds(recent, now),
	}
	for _, s := range statuses {
		v.Perspectives = append(v.Perspectives, viewPerspectiveRow(s))
		v.Pending += s.Pending
		v.DeadLetters += s.DeadLetters
	}
	for _, in := range instances {
		row := viewInstance(in, now, p.liveWithin)
		v.Instances = append(v.Instances, row)
		if row.Live {
			v.LiveInstances++
		}
	}
	p.render(w, r, http.StatusOK, tmplOverview, v)
}

// rebuilds returns the pending and running rebuild requests (of
// perspective, when set), running first, and the latest finished ones.
func (p *page) rebuilds(ctx context.Context, perspective string) (active, recent []ports.RebuildRequest, err error) {
	for _, status := range []ports.RebuildStatus{ports.RebuildRunning, ports.RebuildPending} {
		list, err := p.admin.RebuildsList(ctx, &ports.RebuildsListParams{Perspective: perspective, Status: status})
		if err != nil {
			return nil, nil, err
		}
		active = append(active, list...)
	}
	// The latest requests, active ones included, are enough to find the
	// latest finished ones unless many are active at once.
	latest, err := p.admin.RebuildsList(ctx, &ports.RebuildsListParams{Perspective: perspective, Limit: len(active) + recentRebuilds})
	if err != nil {
		return nil, nil, err
	}
	for _, req := range latest {
		if req.Status != ports.RebuildPending && req.Status != ports.RebuildRunning && len(recent) < recentRebuilds {
			recent = append(recent, req)
		}
	}
	return active, recent, nil
}

func viewRebuilds(reqs []ports.RebuildRequest, now time.Time) []rebuildRow {
	rows := make([]rebuildRow, len(reqs))
	for i, req := range reqs {
		rows[i] = viewRebuild(req, now)
	}
	return rows
}

// deadLettersView is the page that lists dead letters.
type deadLettersView struct {
	layout
	Perspective string
	Status      string
	Statuses    []string
	// DeadLetterList is the page of dead letters.
	DeadLetterList []deadLetterRow
	// Paged is set past the first page, whose link FirstLink is;
	// NextLink is the next page's, "" on the last.
	Paged     bool
	FirstLink string
	NextLink  string
	// CanRequeueAll shows the bulk requeue of Perspective's waiting dead
	// letters.
	CanRequeueAll bool
}

// statusAll is the status filter that keeps every dead letter.
const statusAll = "all"

var deadLetterStatuses = []string{
	string(ports.DeadLetterDead), string(ports.DeadLetterRequeued),
	string(ports.DeadLetterRecovered), string(ports.DeadLetterIgnored), statusAll,
}

func (p *page) deadLettersPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	perspective := q.Get("perspective")
	status := q.Get("status")
	if status == "" {
		status = string(ports.DeadLetterDead)
	}
	if !slices.Contains(deadLetterStatuses, status) {
		p.badRequest(w, r, fmt.Sprintf("Unknown status %q: the status of a dead letter is one of %s.", status, strings.Join(deadLetterStatuses, ", ")))
		return
	}
	after, err := parseCursor(q.Get("after"))
	if err != nil {
		p.badRequest(w, r, err.Error())
		return
	}
	params := &ports.DeadLettersListParams{Perspective: perspective, NewestFirst: true, After: after, Limit: p.pageSize + 1}
	if status != statusAll {
		params.Status = ports.DeadLetterStatus(status)
	}
	list, err := p.deadLetters.DeadLettersList(r.Context(), params)
	if err != nil {
		p.failBackend(w, r, err, "listing the dead letters")
		return
	}
	now, _ := p.now()
	first := deadLettersLink(perspective, q.Get("status"))
	back := first
	if !after.DeadLetteredAt.IsZero() {
		back = pageLink(first, "after", q.Get("after"))
	}
	v := deadLettersView{
		layout:        p.layoutFor(w, r, "Dead letters", "dead-letters", back, now),
		Perspective:   perspective,
		Status:        status,
		Statuses:      deadLetterStatuses,
		Paged:         !after.DeadLetteredAt.IsZero(),
		FirstLink:     first,
		CanRequeueAll: perspective != "" && status == string(ports.DeadLetterDead),
	}
	if len(list) > p.pageSize {
		list = list[:p.pageSize]
		v.NextLink = pageLink(first, "after", formatCursor(list[len(list)-1].Cursor()))
	}
	for _, dl := range list {
		v.DeadLetterList = append(v.DeadLetterList, viewDeadLetter(dl, now))
	}
	p.render(w, r, http.StatusOK, tmplDeadLetters, v)
}

// pageLink adds the query parameter key=value to the relative link.
func pageLink(link, key, value string) string {
	sep := "?"
	if strings.Contains(link, "?") {
		sep = "&"
	}
	return link + sep + url.Values{key: {value}}.Encode()
}

// formatCursor writes a place in a listing of dead letters as the after
// parameter of the next page: the time, to the nanosecond, and the id.
func formatCursor(c ports.DeadLetterCursor) string {
	return c.DeadLetteredAt.UTC().Format(time.RFC3339Nano) + "_" + c.ID.String()
}

// parseCursor reads what formatCursor wrote; "" is the first page.
func parseCursor(s string) (ports.DeadLetterCursor, error) {
	if s == "" {
		return ports.DeadLetterCursor{}, nil
	}
	bad := fmt.Errorf("Malformed page position %q: follow the links of the dead-letters page.", s)
	ts, rawID, ok := strings.Cut(s, "_")
	if !ok {
		return ports.DeadLetterCursor{}, bad
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return ports.DeadLetterCursor{}, bad
	}
	id, err := uuid.Parse(rawID)
	if err != nil {
		return ports.DeadLetterCursor{}, bad
	}
	return ports.DeadLetterCursor{DeadLetteredAt: t, ID: id}, nil
}

// deadLetterView is the page of one dead letter.
type deadLetterView struct {
	layout
	deadLetterRow
	// Actions are its buttons' inputs.
	Actions deadLetterActions
}

func (p *page) deadLetterPage(w http.ResponseWriter, r *http.Request) {
	id, ok := p.idParam(w, r, r.URL.Query().Get("id"))
	if !ok {
		return
	}
	dl, err := p.admin.DeadLetterGet(r.Context(), &ports.DeadLetterGetParams{ID: id})
	if err != nil {
		p.failDeadLetter(w, r, err, id, "reading", "cannot be read")
		return
	}
	now, _ := p.now()
	row := viewDeadLetter(dl, now)
	l := p.layoutFor(w, r, "Dead letter "+id.String(), "dead-letters", deadLetterLink(id), now)
	p.render(w, r, http.StatusOK, tmplDeadLetter, deadLetterView{layout: l, deadLetterRow: row, Actions: withBack(row, l.Back)})
}

// idParam parses the id of a dead letter, rendering the 400 page when it
// is missing or malformed.
func (p *page) idParam(w http.ResponseWriter, r *http.Request, raw string) (uuid.UUID, bool) {
	if raw == "" {
		p.badRequest(w, r, "No dead letter id: the request names none.")
		return uuid.Nil, false
	}
	id, err := uuid.Parse(raw)
	if err != nil || id == uuid.Nil {
		p.badRequest(w, r, fmt.Sprintf("Malformed dead letter id %q: an id is a UUID.", raw))
		return uuid.Nil, false
	}
	return id, true
}

// perspectiveView is the page of one perspective.
type perspectiveView struct {
	layout
	perspectiveRow
	// DeadLetterList is its latest waiting dead letters.
	DeadLetterList  []deadLetterRow
	MoreDeadLetters bool
	ActiveRebuilds  []rebuildRow
	RecentRebuilds  []rebuildRow
	RetireLink      string
}

func (p *page) perspectivePage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	now, backendNow := p.now()
	status, ok := p.knownPerspective(w, r, r.URL.Query().Get("name"), backendNow)
	if !ok {
		return
	}
	dls, err := p.deadLetters.DeadLettersList(ctx, &ports.DeadLettersListParams{
		Perspective: status.Perspective, Status: ports.DeadLetterDead, NewestFirst: true, Limit: perspectiveDeadLetters + 1,
	})
	if err != nil {
		p.failBackend(w, r, err, "listing the dead letters of perspective "+status.Perspective)
		return
	}
	active, recent, err := p.rebuilds(ctx, status.Perspective)
	if err != nil {
		p.failBackend(w, r, err, "listing the rebuild requests of perspective "+status.Perspective)
		return
	}
	v := perspectiveView{
		layout:         p.layoutFor(w, r, "Perspective "+status.Perspective, "overview", perspectiveLink(status.Perspective), now),
		perspectiveRow: viewPerspectiveRow(status),
		ActiveRebuilds: viewRebuilds(active, now),
		RecentRebuilds: viewRebuilds(recent, now),
		RetireLink:     retireLink(status.Perspective),
	}
	if len(dls) > perspectiveDeadLetters {
		dls, v.MoreDeadLetters = dls[:perspectiveDeadLetters], true
	}
	for _, dl := range dls {
		v.DeadLetterList = append(v.DeadLetterList, viewDeadLetter(dl, now))
	}
	p.render(w, r, http.StatusOK, tmplPerspective, v)
}

// knownPerspective returns the status of the perspective name, rendering
// the 400 page when name is empty and the 404 page when the backend knows
// no such perspective.
func (p *page) knownPerspective(w http.ResponseWriter, r *http.Request, name string, backendNow time.Time) (ports.PerspectiveStatus, bool) {
	if name == "" {
		p.badRequest(w, r, "No perspective: the request names none.")
		return ports.PerspectiveStatus{}, false
	}
	statuses, err := p.admin.PerspectivesStatus(r.Context(), &ports.PerspectivesStatusParams{Now: backendNow})
	if err != nil {
		p.failBackend(w, r, err, "reading the perspectives' status")
		return ports.PerspectiveStatus{}, false
	}
	i := slices.IndexFunc(statuses, func(s ports.PerspectiveStatus) bool { return s.Perspective == name })
	if i < 0 {
		p.fail(w, r, http.StatusNotFound, "Unknown perspective",
			fmt.Sprintf("No perspective is named %q: no subscription, cursor, pending work or waiting dead letter names it, and it is not retired.", name))
		return ports.PerspectiveStatus{}, false
	}
	return statuses[i], true
}

// retireView is the page that confirms the retirement of a perspective.
type retireView struct {
	layout
	perspectiveRow
}

func (p *page) retireConfirmPage(w http.ResponseWriter, r *http.Request) {
	if !p.authorized(r) {
		p.forbidden(w, r)
		return
	}
	now, backendNow := p.now()
	status, ok := p.knownPerspective(w, r, r.URL.Query().Get("perspective"), backendNow)
	if !ok {
		return
	}
	p.render(w, r, http.StatusOK, tmplRetire, retireView{
		layout:         p.layoutFor(w, r, "Retire perspective "+status.Perspective, "overview", perspectiveLink(status.Perspective), now),
		perspectiveRow: viewPerspectiveRow(status),
	})
}

// forbidden renders the 403 page of a request that may not act.
func (p *page) forbidden(w http.ResponseWriter, r *http.Request) {
	msg := "You are not authorized to act on this page: it is read-only for you."
	if p.signInURL != "" {
		msg += " Sign in to act."
	}
	p.fail(w, r, http.StatusForbidden, "Not authorized", msg)
}
