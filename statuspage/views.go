package statuspage

import (
	"bytes"
	"embed"
	"html/template"
	"net/url"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

//go:embed templates
var templatesFS embed.FS

// viewSet holds one template per page, each parsed with the layout and the
// shared parts.
type viewSet struct {
	pages map[string]*template.Template
}

// The pages' templates, by file name in templates/.
const (
	tmplOverview    = "overview.html"
	tmplDeadLetters = "deadletters.html"
	tmplDeadLetter  = "deadletter.html"
	tmplPerspective = "perspective.html"
	tmplRetire      = "retire.html"
	tmplError       = "error.html"
)

// views is parsed once: a template that does not parse is a bug every
// test finds.
var views = parseViews()

func parseViews() *viewSet {
	funcs := template.FuncMap{"count": count, "plural": pluralOf, "shortID": shortID, "withBack": withBack}
	vs := &viewSet{pages: map[string]*template.Template{}}
	for _, name := range []string{tmplOverview, tmplDeadLetters, tmplDeadLetter, tmplPerspective, tmplRetire, tmplError} {
		vs.pages[name] = template.Must(template.New(name).Funcs(funcs).ParseFS(templatesFS,
			"templates/layout.html", "templates/parts.html", "templates/"+name))
	}
	return vs
}

// execute renders page name with data into a buffer, so that a failure
// leaves the response untouched.
func (vs *viewSet) execute(name string, data any) ([]byte, error) {
	var buf bytes.Buffer
	if err := vs.pages[name].ExecuteTemplate(&buf, "layout", data); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// layout is what every page shows around its content.
type layout struct {
	// Site is Options.Title; Heading the page's own title.
	Site    string
	Heading string
	// Nav names the navigation entry of the page: "overview" or
	// "dead-letters".
	Nav string
	// CanAct is set when the request is authorized to act: only then are
	// the forms rendered.
	CanAct    bool
	SignInURL string
	// Flash reports the outcome of the action that redirected here.
	Flash string
	// Clock is the page's time, absolute.
	Clock string
	// Back is the page's own URL relative to the root ("./" and its
	// link), which its forms post so that the action redirects back to
	// it.
	Back string
	// Root leads from the page to the root: "" but for an error page
	// answering a path below it.
	Root string
}

// perspectiveRow is a perspective as the pages show it: its status and
// the figures computed from it.
type perspectiveRow struct {
	ports.PerspectiveStatus
	Name string
	Link string
	// Lag is the age of the oldest pending work row; "–" without backlog.
	Lag string
	// DeadLettersLink lists its waiting dead letters.
	DeadLettersLink string
}

func viewPerspectiveRow(s ports.PerspectiveStatus) perspectiveRow {
	lag := "–"
	if s.Pending > 0 {
		lag = age(s.OldestAge)
	}
	return perspectiveRow{
		PerspectiveStatus: s,
		Name:              s.Perspective,
		Link:              perspectiveLink(s.Perspective),
		Lag:               lag,
		DeadLettersLink:   deadLettersLink(s.Perspective, ""),
	}
}

// instanceRow is an engine instance as the overview lists it.
type instanceRow struct {
	ID        uuid.UUID
	Service   string
	Host      string
	PID       int
	Heartbeat when
	Started   when
	Live      bool
	Passive   bool
	Leased    int
}

func viewInstance(in ports.Instance, now time.Time, liveWithin time.Duration) instanceRow {
	return instanceRow{
		ID:        in.ID,
		Service:   in.ServiceName,
		Host:      in.HostName,
		PID:       in.ProcessID,
		Heartbeat: whenOf(now, in.LastHeartbeatAt),
		Started:   whenOf(now, in.StartedAt),
		Live:      now.Sub(in.LastHeartbeatAt) < liveWithin,
		Passive:   in.Passive,
		Leased:    in.LeasedStreams,
	}
}

// rebuildRow is a rebuild request as the pages list it.
type rebuildRow struct {
	ID              uuid.UUID
	Perspective     string
	PerspectiveLink string
	Status          string
	Active          bool
	StreamsDone     int64
	StreamsTotal    int64
	// Percent is StreamsDone of StreamsTotal, 0 to 100; Counted is false
	// until the streams are counted.
	Percent        int64
	Counted        bool
	EventsReplayed int64
	// ETA is RebuildRequest.Remaining, "–" when there is nothing to go by.
	ETA         string
	RequestedBy string
	Requested   when
	Finished    when
	Instance    uuid.UUID
	Error       string
}

func viewRebuild(r ports.RebuildRequest, now time.Time) rebuildRow {
	row := rebuildRow{
		ID:              r.ID,
		Perspective:     r.Perspective,
		PerspectiveLink: perspectiveLink(r.Perspective),
		Status:          string(r.Status),
		Active:          r.Status == ports.RebuildPending || r.Status == ports.RebuildRunning,
		StreamsDone:     r.StreamsDone,
		StreamsTotal:    r.StreamsTotal,
		Counted:         r.StreamsTotal > 0,
		EventsReplayed:  r.EventsReplayed,
		ETA:             "–",
		RequestedBy:     r.RequestedBy,
		Requested:       whenOf(now, r.RequestedAt),
		Finished:        whenOf(now, r.FinishedAt),
		Instance:        r.InstanceID,
		Error:           r.Error,
	}
	if row.Counted {
		row.Percent = min(100, r.StreamsDone*100/r.StreamsTotal)
	}
	if rem, ok := r.Remaining(); ok {
		row.ETA = age(rem)
	}
	return row
}

// deadLetterRow is a dead letter as the pages list and show it.
type deadLetterRow struct {
	ports.DeadLetter
	Link            string
	PerspectiveLink string
	DeadLettered    when
	RequeuedAt      when
	ResolvedAt      when
	// ErrorLine is the error cut to one line; the detail page shows it
	// whole.
	ErrorLine string
	// HasInstance is false when no instance is recorded.
	HasInstance bool
	// CanRequeue and CanIgnore say which actions its status allows.
	CanRequeue bool
	CanIgnore  bool
}

func viewDeadLetter(dl ports.DeadLetter, now time.Time) deadLetterRow {
	return deadLetterRow{
		DeadLetter:      dl,
		Link:            deadLetterLink(dl.ID),
		PerspectiveLink: perspectiveLink(dl.Perspective),
		DeadLettered:    whenOf(now, dl.DeadLetteredAt),
		RequeuedAt:      whenOf(now, dl.RequeuedAt),
		ResolvedAt:      whenOf(now, dl.ResolvedAt),
		ErrorLine:       firstLine(dl.Error),
		HasInstance:     dl.InstanceID != uuid.Nil,
		CanRequeue:      dl.Status == ports.DeadLetterDead || dl.Status == ports.DeadLetterIgnored,
		CanIgnore:       dl.Status == ports.DeadLetterDead,
	}
}

// deadLetterActions is what the buttons of a dead letter need: its row,
// and the page they go back to.
type deadLetterActions struct {
	Row  deadLetterRow
	Back string
}

func withBack(row deadLetterRow, back string) deadLetterActions {
	return deadLetterActions{Row: row, Back: back}
}

// Links between the pages, relative to the page's root (see the path
// constants).

func perspectiveLink(name string) string {
	return pathPerspective + "?" + url.Values{"name": {name}}.Encode()
}

func deadLetterLink(id uuid.UUID) string {
	return pathDeadLetter + "?" + url.Values{"id": {id.String()}}.Encode()
}

func deadLettersLink(perspective, status string) string {
	q := url.Values{}
	if perspective != "" {
		q.Set("perspective", perspective)
	}
	if status != "" {
		q.Set("status", status)
	}
	if len(q) == 0 {
		return pathDeadLetters
	}
	return pathDeadLetters + "?" + q.Encode()
}

func retireLink(name string) string {
	return pathRetire + "?" + url.Values{"perspective": {name}}.Encode()
}
