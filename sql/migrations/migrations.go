// Package migrations embeds the versioned PostgreSQL schema of adapters/postgres.
//
// Files are named NNN_snake_name.up.sql with a matching NNN_snake_name.down.sql;
// the three-digit prefix is the version and lexical order is apply order.
// Released files are never edited: a change is the next number. Every table is
// prefixed vantage_ and every reference to the schema is written as the marker
// /* SCHEMA */, which the migrator replaces with the quoted schema name, so one
// database can host several independent services. The migrator records applied
// versions in the vantage_migrations table, which it creates itself.
//
// Applications rarely import it: postgres.Migrate applies these files, and
// postgres.NewMigrator reads them ([FS] when given nil) to apply, read or
// revert versions. Import FS to hand the schema to another migration tool,
// which must replace the schema marker as the migrator does.
package migrations

import "embed"

// FS holds the migration files.
//
//go:embed *.sql
var FS embed.FS
