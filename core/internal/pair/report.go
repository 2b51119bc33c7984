package pair

import (
	"errors"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// ErrRunAbandoned is returned up the run of a pair whose apply the engine
// abandoned: the abandonment took the pair over, so its run must stop at
// once and touch nothing.
var ErrRunAbandoned = errors.New("pair abandoned")

// ReportPosition returns the position (id, version) a report listing rows
// may name: the position the run reached, or the newest of rows when all
// lie below it. Such a run holds re-deliveries only (events a save holds,
// whose completion was lost), and the fetch left the pair's later rows for
// the next one: named past them, the report would not list them, and the
// backend would take them for stragglers never applied (late rows, a
// rewind, or with rewinds off dead letters, for events the model holds).
// The cursor is at the position already: the save that reached it moved
// it.
func ReportPosition(id uuid.UUID, version int64, rows []ports.WorkItem) (uuid.UUID, int64) {
	if len(rows) == 0 {
		return id, version
	}
	newest := rows[0]
	for _, row := range rows[1:] {
		if row.EventVersion > newest.EventVersion {
			newest = row
		}
	}
	if newest.EventVersion >= version {
		return id, version
	}
	return newest.EventID, newest.EventVersion
}
