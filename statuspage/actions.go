package statuspage

import (
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// maxFormBytes bounds the body of an action: its form holds an id or a
// perspective's name, and the page to go back to.
const maxFormBytes = 16 << 10

// action wraps the handler of an action, behind the cross-origin check:
// it accepts only POST, only from a request AuthorizeFunc authorizes,
// and parses the form before act runs.
func (p *page) action(act http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			p.fail(w, r, http.StatusMethodNotAllowed, "Method not allowed",
				"Actions are taken with the buttons of the status page, which post them.")
			return
		}
		if !p.authorized(r) {
			p.log.WarnContext(r.Context(), "unauthorized action refused",
				slog.String("path", r.URL.Path), slog.String("remote_addr", r.RemoteAddr))
			p.forbidden(w, r)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			p.badRequest(w, r, "Unreadable form: "+err.Error()+".")
			return
		}
		act(w, r)
	})
}

// done ends an action that took effect: it leaves flash for the next page
// and redirects (303) to the page the form came from, else to fallback.
func (p *page) done(w http.ResponseWriter, r *http.Request, fallback, flash string) {
	setFlash(w, r, flash)
	seeOther(w, backOr(r.PostFormValue("back"), "./"+fallback))
}

// seeOther redirects to location, a URL relative to the page's root.
// http.Redirect would make it absolute from the request's path, which
// lacks the prefix a StripPrefix removed.
func seeOther(w http.ResponseWriter, location string) {
	w.Header().Set("Location", location)
	w.WriteHeader(http.StatusSeeOther)
}

// pagePaths are the pages an action may go back to.
var pagePaths = []string{pathOverview, pathDeadLetters, pathDeadLetter, pathPerspective}

// backOr returns back, a page of the status page ("./" and its link, as
// layout.Back holds it), or fallback when back is anything else, so that
// a forged form cannot redirect elsewhere.
func backOr(back, fallback string) string {
	rest, ok := strings.CutPrefix(back, "./")
	if !ok {
		return fallback
	}
	u, err := url.Parse(rest)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" || u.Fragment != "" || !slices.Contains(pagePaths, u.Path) {
		return fallback
	}
	return "./" + u.String()
}

// flashCookie carries the outcome of an action to the page it redirects
// to, which shows it once and deletes it. Its path is "/" because the
// page does not know the prefix it is mounted under.
const flashCookie = "vantage_statuspage_flash"

// flashMax bounds the message a flash cookie carries.
const flashMax = 1024

func setFlash(w http.ResponseWriter, r *http.Request, msg string) {
	if len(msg) > flashMax {
		msg = msg[:flashMax]
	}
	http.SetCookie(w, &http.Cookie{
		Name: flashCookie, Value: base64.RawURLEncoding.EncodeToString([]byte(msg)),
		Path: "/", MaxAge: 60, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
}

// takeFlash returns the flash message of r, if any, and deletes it.
func takeFlash(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(flashCookie)
	if err != nil {
		return ""
	}
	http.SetCookie(w, &http.Cookie{
		Name: flashCookie, Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	msg, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil || len(msg) > flashMax {
		return ""
	}
	return string(msg)
}

// logAction records an action taken, with who took it.
func (p *page) logAction(r *http.Request, msg string, attrs ...slog.Attr) {
	attrs = append(attrs, slog.String("actor", p.actorOf(r)), slog.String("remote_addr", r.RemoteAddr))
	p.log.LogAttrs(r.Context(), slog.LevelInfo, msg, attrs...)
}

// failDeadLetter renders the page of an action on dead letter id that the
// backend refused or failed: conflict says why its status forbids it.
func (p *page) failDeadLetter(w http.ResponseWriter, r *http.Request, err error, id uuid.UUID, doing, conflict string) {
	switch {
	case errors.Is(err, ports.ErrNotFound):
		p.fail(w, r, http.StatusNotFound, "Unknown dead letter", fmt.Sprintf("No dead letter has id %s.", id))
	case errors.Is(err, ports.ErrVersionConflict):
		p.fail(w, r, http.StatusConflict, "Not possible in its status", fmt.Sprintf("Dead letter %s %s.", id, conflict))
	default:
		p.failBackend(w, r, err, fmt.Sprintf("%s dead letter %s", doing, id))
	}
}

func (p *page) requeue(w http.ResponseWriter, r *http.Request) {
	id, ok := p.idParam(w, r, r.PostFormValue("id"))
	if !ok {
		return
	}
	_, backendNow := p.now()
	if err := p.admin.DeadLetterRequeue(r.Context(), &ports.DeadLetterRequeueParams{ID: id, Now: backendNow}); err != nil {
		p.failDeadLetter(w, r, err, id, "requeueing", "is requeued or recovered already: only a waiting or ignored dead letter is requeued")
		return
	}
	p.logAction(r, "dead letter requeued", slog.String("dead_letter_id", id.String()))
	p.done(w, r, deadLetterLink(id), fmt.Sprintf("Requeued dead letter %s: its event is pending again.", id))
}

func (p *page) ignore(w http.ResponseWriter, r *http.Request) {
	id, ok := p.idParam(w, r, r.PostFormValue("id"))
	if !ok {
		return
	}
	_, backendNow := p.now()
	if err := p.admin.DeadLetterIgnore(r.Context(), &ports.DeadLetterIgnoreParams{ID: id, Now: backendNow}); err != nil {
		p.failDeadLetter(w, r, err, id, "ignoring", "is requeued or recovered: only a waiting dead letter is ignored")
		return
	}
	p.logAction(r, "dead letter ignored", slog.String("dead_letter_id", id.String()))
	p.done(w, r, deadLetterLink(id), fmt.Sprintf("Ignored dead letter %s: it is never retried unless requeued.", id))
}

func (p *page) requeueAll(w http.ResponseWriter, r *http.Request) {
	_, backendNow := p.now()
	status, ok := p.knownPerspective(w, r, r.PostFormValue("perspective"), backendNow)
	if !ok {
		return
	}
	name := status.Perspective
	n, err := p.admin.DeadLettersRequeue(r.Context(), &ports.DeadLettersRequeueParams{Perspective: name, Now: backendNow})
	if err != nil {
		p.failBackend(w, r, err, "requeueing the dead letters of perspective "+name)
		return
	}
	p.logAction(r, "dead letters requeued", slog.String("perspective", name), slog.Int("count", n))
	msg := fmt.Sprintf("Requeued %s of %s: their events are pending again.", plural(n, "dead letter"), name)
	if n == 0 {
		msg = fmt.Sprintf("No dead letter of %s was waiting: nothing was requeued.", name)
	}
	p.done(w, r, deadLettersLink(name, ""), msg)
}

func (p *page) rebuild(w http.ResponseWriter, r *http.Request) {
	_, backendNow := p.now()
	status, ok := p.knownPerspective(w, r, r.PostFormValue("perspective"), backendNow)
	if !ok {
		return
	}
	name := status.Perspective
	if status.Retired {
		p.fail(w, r, http.StatusConflict, "Perspective retired",
			fmt.Sprintf("Perspective %s is retired: no instance runs it, so nothing would rebuild it. Revive it first.", name))
		return
	}
	req, err := p.admin.RebuildRequest(r.Context(), &ports.RebuildRequestParams{Perspective: name, RequestedBy: p.actorOf(r), Now: backendNow})
	if err != nil {
		p.failBackend(w, r, err, "requesting a rebuild of perspective "+name)
		return
	}
	p.logAction(r, "rebuild requested", slog.String("perspective", name), slog.String("rebuild_id", req.ID.String()))
	p.done(w, r, perspectiveLink(name),
		fmt.Sprintf("Requested a rebuild of %s (request %s): an instance that runs it will carry it out.", name, req.ID))
}

func (p *page) retire(w http.ResponseWriter, r *http.Request) {
	_, backendNow := p.now()
	status, ok := p.knownPerspective(w, r, r.PostFormValue("perspective"), backendNow)
	if !ok {
		return
	}
	name := status.Perspective
	if r.PostFormValue("confirm") != "yes" {
		// Retiring deletes work, and maybe the models: only the
		// confirmation page's form retires.
		seeOther(w, "./"+retireLink(name))
		return
	}
	drop := r.PostFormValue("drop_state") == "yes"
	res, err := p.admin.PerspectiveRetire(r.Context(), &ports.PerspectiveRetireParams{Perspective: name, DropState: drop})
	if err != nil {
		p.failBackend(w, r, err, "retiring perspective "+name)
		return
	}
	p.logAction(r, "perspective retired", slog.String("perspective", name), slog.Bool("drop_state", drop),
		slog.Int("subscriptions", res.Subscriptions), slog.Int("work", res.Work),
		slog.Int("cursors", res.Cursors), slog.Int("models", res.Models), slog.Int("snapshots", res.Snapshots))
	msg := fmt.Sprintf("Retired %s: deleted %s and %s", name, plural(res.Subscriptions, "subscription"), plural(res.Work, "pending work row"))
	if drop {
		msg += fmt.Sprintf(", %s, %s and %s", plural(res.Cursors, "cursor"), plural(res.Models, "model"), plural(res.Snapshots, "snapshot"))
	}
	p.done(w, r, perspectiveLink(name), msg+".")
}

func (p *page) revive(w http.ResponseWriter, r *http.Request) {
	_, backendNow := p.now()
	status, ok := p.knownPerspective(w, r, r.PostFormValue("perspective"), backendNow)
	if !ok {
		return
	}
	name := status.Perspective
	if !status.Retired {
		p.done(w, r, perspectiveLink(name), fmt.Sprintf("%s is not retired: nothing to revive.", name))
		return
	}
	if err := p.admin.PerspectiveRevive(r.Context(), &ports.PerspectiveReviveParams{Perspective: name}); err != nil {
		p.failBackend(w, r, err, "reviving perspective "+name)
		return
	}
	p.logAction(r, "perspective revived", slog.String("perspective", name))
	// Not back to the perspective's page: a perspective known only by its
	// retirement is known no more.
	setFlash(w, r, fmt.Sprintf("Revived %s: its next registration subscribes it again.", name))
	seeOther(w, "./")
}

// plural returns "n noun" or "n nouns".
func plural(n int, noun string) string { return pluralOf(int64(n), noun) }
