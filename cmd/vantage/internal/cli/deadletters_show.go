package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/vantage-go/vantage/ports"
)

func (a *app) deadLettersShowCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show one dead letter in full, with its event",
		Long: `Show everything about one dead letter: its perspective and stream, the
event it holds back (id, type, version, when it was stored, its data and
metadata), why the engine gave up on it (reason, attempts, the error in
full, the instance and deploy generation that gave up) and where it stands
(status, requeues, when it was requeued or resolved).

The event is read from its stream: dead letters keep only its id and
version. An id no dead letter has fails with exit 4.

JSON: {"dead_letter": {the fields of 'dead-letters list'}, "event": {"id",
"type", "version", "created_at", "data", "metadata"}}; data is the event's
JSON document as stored, metadata its metadata as stored (correlation_id,
causation_id, scope, headers, traceparent, tracestate, each absent when
unset); event is null when its stream no longer holds it.`,
		Example: `  vantage dead-letters show 0197a3c4-5b6e-7f80-9a1b-2c3d4e5f6a7b
  vantage dl show 0197a3c4-5b6e-7f80-9a1b-2c3d4e5f6a7b --json | jq .event.data`,
		Args: exactArgs("ID"),
		RunE: a.action(func(ctx context.Context, args []string) error { return a.deadLetterShow(ctx, args[0]) }),
	}
}

// eventView is an event as dead-letters show reports it.
type eventView struct {
	ID        uuid.UUID       `json:"id"`
	Type      string          `json:"type"`
	Version   int64           `json:"version"`
	CreatedAt *time.Time      `json:"created_at"`
	Data      json.RawMessage `json:"data"`
	Metadata  json.RawMessage `json:"metadata"`
}

type deadLetterReport struct {
	DeadLetter deadLetterView `json:"dead_letter"`
	Event      *eventView     `json:"event"`
}

func (r *deadLetterReport) writeText(w io.Writer) {
	dl, ev := r.DeadLetter, r.Event
	event := fmt.Sprintf("%s, version %d: not in its stream any more", dl.EventID, dl.EventVersion)
	if ev != nil {
		event = fmt.Sprintf("%s, %s, version %d, stored %s", ev.ID, ev.Type, ev.Version, timeText(deref(ev.CreatedAt)))
	}
	instance := "-"
	if dl.InstanceID != nil {
		instance = dl.InstanceID.String()
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, kv := range [][2]string{
		{"dead letter", dl.ID.String()},
		{"perspective", cell(dl.Perspective)},
		{"stream", dl.StreamID.String()},
		{"event", event},
		{"status", dl.Status},
		{"reason", cell(dl.Reason)},
		{"attempts", strconv.Itoa(dl.Attempts)},
		{"dead-lettered", timeText(deref(dl.DeadLetteredAt))},
		{"instance", instance},
		{"generation", orDash(dl.Generation)},
		{"requeues", strconv.Itoa(dl.Requeues)},
		{"last requeued", requeueText(dl)},
		{"resolved", timeText(deref(dl.ResolvedAt))},
		{"work id", dl.WorkID.String()},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
	}
	_ = tw.Flush() // the writes went to w; nothing to do if it fails
	writeBlock(w, "error", dl.Error)
	if ev != nil {
		writeBlock(w, "data", indentJSON(ev.Data))
		writeBlock(w, "metadata", indentJSON(ev.Metadata))
	}
}

// requeueText describes the latest requeue of dl.
func requeueText(dl deadLetterView) string {
	if dl.RequeuedAt == nil {
		return "-"
	}
	if dl.RequeueGeneration == "" {
		return timeText(*dl.RequeuedAt)
	}
	return fmt.Sprintf("%s, generation %s", timeText(*dl.RequeuedAt), dl.RequeueGeneration)
}

// writeBlock writes text in full under a "name:" line, each line indented
// by two spaces: the texts tables cut to one line.
func writeBlock(w io.Writer, name, text string) {
	fmt.Fprintf(w, "%s:\n", name)
	text = strings.TrimRight(text, "\n")
	if text == "" {
		text = "-"
	}
	for line := range strings.SplitSeq(text, "\n") {
		fmt.Fprintf(w, "  %s\n", strings.TrimRight(line, " \t\r"))
	}
}

// indentJSON returns a JSON document indented for reading, or as it is
// when it does not parse.
func indentJSON(doc []byte) string {
	var b bytes.Buffer
	if err := json.Indent(&b, doc, "", "  "); err != nil {
		return string(doc)
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (a *app) deadLetterShow(ctx context.Context, arg string) error {
	id, err := uuid.Parse(arg)
	if err != nil {
		return usageErrorf("not a dead letter id (a UUID): %q", arg)
	}
	s, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	cctx, cancel := a.call(ctx)
	defer cancel()
	dl, err := s.admin.DeadLetterGet(cctx, &ports.DeadLetterGetParams{ID: id})
	if errors.Is(err, ports.ErrNotFound) {
		return notFoundErrorf("no dead letter has id %s in schema %q", id, a.schema)
	}
	if err != nil {
		return err
	}
	r := &deadLetterReport{DeadLetter: viewDeadLetter(dl)}
	if r.Event, err = a.deadLetterEvent(ctx, s, dl); err != nil {
		return err
	}
	return a.print(r)
}

// deadLetterEvent reads the event dl holds back from its stream; nil when
// the stream no longer holds it.
func (a *app) deadLetterEvent(ctx context.Context, s *session, dl ports.DeadLetter) (*eventView, error) {
	cctx, cancel := a.call(ctx)
	defer cancel()
	events, err := s.events.EventsReadStream(cctx, &ports.EventsReadStreamParams{
		StreamID: dl.StreamID, AfterVersion: dl.EventVersion - 1, Limit: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("reading the event of dead letter %s: %w", dl.ID, err)
	}
	if len(events) == 0 || events[0].ID != dl.EventID {
		return nil, nil
	}
	e := events[0]
	meta, err := json.Marshal(e.Metadata)
	if err != nil {
		return nil, fmt.Errorf("encoding the metadata of event %s: %w", e.ID, err)
	}
	data := json.RawMessage(e.Data)
	if !json.Valid(data) { // stored by a backend that checks nothing: show it as a string
		data, _ = json.Marshal(string(e.Data))
	}
	return &eventView{ID: e.ID, Type: e.Type, Version: e.Version, CreatedAt: jsonTime(e.CreatedAt), Data: data, Metadata: meta}, nil
}
