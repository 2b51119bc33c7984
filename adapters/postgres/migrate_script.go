package postgres

import (
	"fmt"
	"strings"
	"time"
)

// migrationLock is the first key of the advisory lock that serialises the
// migrators of a schema (the second is the schema's name).
const migrationLock = "vantage_migrate"

// versionTableDDL creates the version table of the schema quoted as %s.
const versionTableDDL = `CREATE TABLE IF NOT EXISTS %s.vantage_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
`

// ScriptParams selects the versions of a Migrator.Script.
type ScriptParams struct {
	// Down writes the revert script, from From down to To; otherwise the
	// script migrates up from From to To.
	Down bool
	// From is the version the schema is at when the script starts, To the
	// version it leaves it at, both from 0 to the latest known version:
	// above From for an up script, below it for a down script.
	From, To int
	// Force leaves out the down script's check for live instances.
	Force bool
	// LiveWithin tells live instances from stale ones in the down script's
	// check, as RevertParams.LiveWithin. Defaults to LiveWithinDefault.
	// Must not be negative.
	LiveWithin time.Duration
}

// Script returns the SQL that migrates the schema as Up and Down do, for
// review or to be applied with psql (-v ON_ERROR_STOP=1): one transaction
// per version, which takes the migrators' lock on the schema, stops unless
// the schema is at the version the step expects (so a script applied
// twice, or to a schema at another version, changes nothing), changes the
// tables and records the version. The first version also creates the
// schema and the version table. A down step also stops while instances
// heartbeat within LiveWithin, holding their heartbeats back until the
// version is reverted, unless Force. It fails on versions out of range.
func (m *Migrator) Script(params *ScriptParams) (string, error) {
	p := *params
	latest := m.Latest()
	if p.LiveWithin == 0 {
		p.LiveWithin = LiveWithinDefault
	}
	switch {
	case p.From < 0 || p.From > latest:
		return "", fmt.Errorf("from version %d: must be from 0 to %d", p.From, latest)
	case p.To < 0 || p.To > latest:
		return "", fmt.Errorf("to version %d: must be from 0 to %d", p.To, latest)
	case p.Down && p.To >= p.From:
		return "", fmt.Errorf("a down script goes down: to version %d must be below from version %d", p.To, p.From)
	case !p.Down && p.To <= p.From:
		return "", fmt.Errorf("an up script goes up: to version %d must be above from version %d", p.To, p.From)
	case p.LiveWithin < 0:
		return "", fmt.Errorf("LiveWithin must not be negative, got %s", p.LiveWithin)
	}
	w := &scriptWriter{schema: m.schema, quoted: quoteSchema(m.schema)}
	if p.Down {
		w.down(m.migrations, &p)
	} else {
		w.up(m.migrations, &p)
	}
	return w.b.String(), nil
}

// scriptWriter writes the SQL of migrations as the migrator runs them.
type scriptWriter struct {
	schema, quoted string
	b              strings.Builder
}

func (w *scriptWriter) printf(format string, args ...any) { fmt.Fprintf(&w.b, format, args...) }

func (w *scriptWriter) up(migs []Migration, p *ScriptParams) {
	w.printf("-- Vantage schema %s: migrate up from version %d to %d.\n", w.quoted, p.From, p.To)
	w.printf("-- Apply with: psql -v ON_ERROR_STOP=1 -f FILE\n")
	for _, mig := range migs[p.From:p.To] {
		w.begin(mig, "up")
		if mig.Version == 1 {
			w.printf("CREATE SCHEMA IF NOT EXISTS %s;\n", w.quoted)
			w.printf(versionTableDDL, w.quoted)
		}
		w.expectVersion(mig.Version - 1)
		w.body(mig.Up)
		w.printf("INSERT INTO %s.vantage_migrations (version, name) VALUES (%d, '%s');\n", w.quoted, mig.Version, mig.Name)
		w.printf("COMMIT;\n")
	}
}

func (w *scriptWriter) down(migs []Migration, p *ScriptParams) {
	w.printf("-- Vantage schema %s: migrate down from version %d to %d.\n", w.quoted, p.From, p.To)
	w.printf("-- Apply with: psql -v ON_ERROR_STOP=1 -f FILE\n")
	w.printf("-- What the reverted tables and columns hold is lost.\n")
	for v := p.From; v > p.To; v-- {
		mig := migs[v-1]
		w.begin(mig, "down")
		w.expectVersion(mig.Version)
		if !p.Force {
			w.refuseIfLive(mig.Version, p.LiveWithin)
		}
		w.body(mig.Down)
		w.printf("DELETE FROM %s.vantage_migrations WHERE version = %d;\n", w.quoted, mig.Version)
		w.printf("COMMIT;\n")
	}
}

// begin opens the transaction of a version and takes the migrators' lock
// on the schema, which serialises it with instances migrating meanwhile.
func (w *scriptWriter) begin(mig Migration, direction string) {
	w.printf("\n-- %03d_%s (%s)\nBEGIN;\n", mig.Version, mig.Name, direction)
	w.printf("SELECT pg_advisory_xact_lock(hashtext('%s'), hashtext('%s'));\n", migrationLock, w.schema)
}

// expectVersion stops the script unless the schema is at version v.
func (w *scriptWriter) expectVersion(v int) {
	w.printf(`DO $vantage$
DECLARE current integer;
BEGIN
    SELECT coalesce(max(version), 0) INTO current FROM %[1]s.vantage_migrations;
    IF current <> %[2]d THEN
        RAISE EXCEPTION 'schema %[3]s is at version %%, this step expects version %[2]d', current;
    END IF;
END
$vantage$;
`, w.quoted, v, w.schema)
}

// refuseIfLive stops the script while instances heartbeat within
// liveWithin, holding their heartbeats back until the version is reverted,
// as Revert does.
func (w *scriptWriter) refuseIfLive(v int, liveWithin time.Duration) {
	w.printf("LOCK TABLE %s.vantage_instances IN SHARE MODE;\n", w.quoted)
	w.printf(`DO $vantage$
DECLARE live integer;
BEGIN
    SELECT count(*) INTO live FROM %[1]s.vantage_instances
    WHERE last_heartbeat_at > now() - interval '%[2]d milliseconds';
    IF live > 0 THEN
        RAISE EXCEPTION 'refusing to revert version %[3]d of schema %[4]s: %% engine instance(s) live (heartbeat within %[5]s); stop them first', live;
    END IF;
END
$vantage$;
`, w.quoted, liveWithin.Milliseconds(), v, w.schema, liveWithin)
}

// body writes a migration's text with the schema filled in.
func (w *scriptWriter) body(text string) {
	w.printf("%s\n", strings.TrimRight(renderSchema(text, w.schema), "\n"))
}
