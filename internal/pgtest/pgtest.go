// Package pgtest provides the PostgreSQL database of the Postgres tests: one
// server per test process, a shared pool, and a migrated, empty schema for
// each test's exclusive use (pooled: emptied after the test, not dropped).
//
// The server is found, in this order:
//
//  1. VANTAGE_TEST_DATABASE_URL, or else DATABASE_URL;
//  2. a server answering on 127.0.0.1:5432 (user postgres, database test,
//     then database postgres);
//  3. an ephemeral cluster made with the local initdb and pg_ctl (on PATH or
//     under /usr/lib/postgresql/*/bin) in a temporary directory;
//  4. a postgres container started through Docker (dockertest).
//
// When none is available the tests are skipped with a message saying how to
// enable them, unless the CI environment variable is set: then they fail.
// VANTAGE_TEST_DATABASE_SKIP=local (or =docker) skips the first sources, to
// exercise the fallbacks.
//
// A test that stops, restarts or crashes its server needs one of its own:
// StartCluster (or RequireCluster in a test) makes a private cluster with
// the local binaries, which its caller may Restart and must Close.
//
// A test of the adapter behind a connection pooler starts a private
// pgbouncer in front of the test database: StartPgBouncer (or
// RequirePgBouncer in a test), in transaction pooling mode unless told
// otherwise, whose ConnString a pool (NewPoolWith) connects to.
//
// A test package using pgtest must wrap its TestMain with WrapMain, which
// closes the shared pool and stops a server pgtest started once the tests
// are done:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.WrapMain(m)) }
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/vantage-go/vantage/adapters/postgres"
)

// Environment variables read by pgtest.
const (
	EnvURL         = "VANTAGE_TEST_DATABASE_URL"
	EnvURLFallback = "DATABASE_URL"
	EnvCI          = "CI"
	// EnvSkip exercises the fallbacks: "local" skips the URLs and the
	// server on 127.0.0.1:5432 (an ephemeral cluster, else Docker);
	// "docker" goes straight to Docker.
	EnvSkip = "VANTAGE_TEST_DATABASE_SKIP"
)

// howToEnable is the skip message when no server could be found.
const howToEnable = "no PostgreSQL for the Postgres tests: set " + EnvURL +
	" (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable), run a server on 127.0.0.1:5432" +
	" with user postgres and database test, install the PostgreSQL server binaries (initdb, pg_ctl)," +
	" or start Docker"

// server is the process-wide database.
type server struct {
	connString string
	source     string // how it was found, for logs
	pool       *pgxpool.Pool
	stop       func() // stops what pgtest started; nil for external servers
	err        error  // why no server is available
	token      string // random part of pooled schema names

	// mu guards the schema pool.
	mu   sync.Mutex
	free []string // migrated, empty schemas ready for a test
	made int      // pooled schemas created so far
}

var (
	mu     sync.Mutex
	shared *server
	closed bool
)

// get returns the shared server, finding (or starting) it on first use.
func get(t testing.TB) *server {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if closed {
		t.Fatal("pgtest: used after WrapMain's Run returned")
	}
	if shared == nil {
		shared = find()
	}
	if shared.err != nil {
		if os.Getenv(EnvCI) != "" {
			t.Fatalf("pgtest: %v (CI is set, so this is an error)", shared.err)
		}
		t.Skipf("pgtest: %v", shared.err)
	}
	return shared
}

// find tries the sources of the package documentation in order.
func find() *server {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var tried []string
	skip := os.Getenv(EnvSkip)
	if skip == "" {
		for _, key := range []string{EnvURL, EnvURLFallback} {
			if cs := os.Getenv(key); cs != "" {
				s, err := connect(ctx, cs, key)
				if err != nil {
					return &server{err: fmt.Errorf("%s is set but unusable: %w", key, err)}
				}
				return s
			}
		}
		for _, cs := range []string{
			"postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
			"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
		} {
			s, err := connect(ctx, cs, "127.0.0.1:5432")
			if err == nil {
				return s
			}
			tried = append(tried, fmt.Sprintf("127.0.0.1:5432: %v", err))
		}
	}
	if skip != "docker" {
		s, err := startCluster(ctx)
		if err == nil {
			return s
		}
		tried = append(tried, fmt.Sprintf("initdb: %v", err))
	}
	s, err := startDocker(ctx)
	if err == nil {
		return s
	}
	tried = append(tried, fmt.Sprintf("docker: %v", err))
	return &server{err: fmt.Errorf("%s (tried: %s)", howToEnable, strings.Join(tried, "; "))}
}

// connect opens the shared pool on cs and checks the server answers.
func connect(ctx context.Context, cs, source string) (*server, error) {
	cfg, err := poolConfig(cs, 10)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.ConnectTimeout = 3 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, err
	}
	var token [3]byte
	if _, err := rand.Read(token[:]); err != nil {
		pool.Close()
		return nil, err
	}
	return &server{connString: cs, source: source, pool: pool, token: hex.EncodeToString(token[:])}, nil
}

// poolConfig parses cs for a test pool of at most maxConns connections. The
// search_path is empty, so a query that forgets its schema fails loudly.
func poolConfig(cs string, maxConns int32) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(cs)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.RuntimeParams["search_path"] = ""
	return cfg, nil
}

// Pool returns the process-wide pool on the test database. It is closed by
// WrapMain; tests must not close it. Its search_path is empty.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return get(t).pool
}

// ConnString returns the connection string of the test database (URL form),
// for clients other than the shared pool, such as the lib/pq listener.
func ConnString(t testing.TB) string {
	t.Helper()
	return get(t).connString
}

// NewPool returns a new pool of at most maxConns connections (4 when not
// positive) on the test database, closed in t.Cleanup. Tests that simulate
// several engine instances give each one its own pool.
func NewPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	return NewPoolWith(t, PoolOptions{MaxConns: maxConns})
}

// PoolOptions configure NewPoolWith. The zero value is valid.
type PoolOptions struct {
	// ConnString is the database to connect to (pgx syntax), such as a
	// PgBouncer's. Defaults to the test database (see ConnString).
	ConnString string
	// MaxConns caps the pool's connections. Defaults to 4.
	MaxConns int32
	// QueryExecMode is how the pool's connections run queries (its
	// ConnConfig.DefaultQueryExecMode). Defaults to pgx's default,
	// pgx.QueryExecModeCacheStatement.
	QueryExecMode pgx.QueryExecMode
}

// NewPoolWith returns a new pool configured by opts, closed in t.Cleanup.
// Its search_path is empty, unless a PgBouncer drops it (see
// PgBouncerOptions).
func NewPoolWith(t testing.TB, opts PoolOptions) *pgxpool.Pool {
	t.Helper()
	cs := opts.ConnString
	if cs == "" {
		cs = get(t).connString
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = 4
	}
	cfg, err := poolConfig(cs, opts.MaxConns)
	if err != nil {
		t.Fatalf("pgtest: parsing connection string: %v", err)
	}
	if opts.QueryExecMode != 0 {
		cfg.ConnConfig.DefaultQueryExecMode = opts.QueryExecMode
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: opening pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// Schema returns a migrated schema for the test's exclusive use, empty, and
// takes it back in t.Cleanup. Tests that share nothing can thus run in
// parallel on one database, and LISTEN/NOTIFY (delivered only on commit)
// stays within the test.
//
// Schemas are pooled per process, because migrating one costs far more than
// emptying it: on cleanup every vantage_ table is emptied (rows only; the
// version stays), any other table the test created is dropped, and the
// schema waits for the next test. A schema that cannot be reset is dropped.
// WrapMain drops the pool when the tests are done.
func Schema(t testing.TB) string {
	t.Helper()
	s := get(t)
	ctx := context.WithoutCancel(t.Context())
	name := s.takeSchema()
	if name == "" {
		name = s.newPoolSchemaName()
		if err := postgres.Migrate(ctx, s.pool, name); err != nil {
			t.Fatalf("pgtest: migrating schema %s: %v", name, err)
		}
	}
	t.Cleanup(func() {
		if err := resetSchema(ctx, s.pool, name); err != nil {
			t.Logf("pgtest: resetting schema %s failed, dropping it: %v", name, err)
			if err := dropSchema(ctx, s.pool, name); err != nil {
				t.Errorf("pgtest: dropping schema %s: %v", name, err)
			}
			return
		}
		s.putSchema(name)
	})
	return name
}

// takeSchema returns a pooled schema, or "" when none is free.
func (s *server) takeSchema() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.free); n > 0 {
		name := s.free[n-1]
		s.free = s.free[:n-1]
		return name
	}
	return ""
}

func (s *server) putSchema(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.free = append(s.free, name)
}

// newPoolSchemaName names pooled schemas after the process, so concurrent
// test processes (go test runs packages in parallel) never share one.
func (s *server) newPoolSchemaName() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.made++
	return fmt.Sprintf("t_pool_%d_%s_%d", os.Getpid(), s.token, s.made)
}

// resetSchema empties a pooled schema: rows of the vantage_ tables go (the
// migration version stays), other tables are dropped, and so are the
// indexes of models that perspectives declared (ports.ModelQuery), which
// would otherwise slow the saves of the next tests and serve their
// queries.
func resetSchema(ctx context.Context, pool *pgxpool.Pool, name string) error {
	rows, err := pool.Query(ctx, `SELECT tablename::text FROM pg_catalog.pg_tables WHERE schemaname = $1`, name)
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	rows, err = pool.Query(ctx, `SELECT indexname::text FROM pg_catalog.pg_indexes
		WHERE schemaname = $1 AND tablename = 'vantage_models' AND indexname LIKE 'vantage\_model\_%'`, name)
	if err != nil {
		return err
	}
	indexes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	for _, index := range indexes {
		b.Queue(`DROP INDEX IF EXISTS ` + pgx.Identifier{name, index}.Sanitize())
	}
	for _, table := range tables {
		q := pgx.Identifier{name, table}.Sanitize()
		switch {
		case table == "vantage_migrations":
		case strings.HasPrefix(table, "vantage_"):
			b.Queue(`DELETE FROM ` + q)
		default:
			b.Queue(`DROP TABLE IF EXISTS ` + q + ` CASCADE`)
		}
	}
	return pool.SendBatch(ctx, b).Close()
}

func dropSchema(ctx context.Context, pool *pgxpool.Pool, name string) error {
	_, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{name}.Sanitize()+` CASCADE`)
	return err
}

// NewSchemaName returns a unique, valid schema name derived from the test
// name, without creating anything. The caller drops what it creates.
func NewSchemaName(t testing.TB) string {
	t.Helper()
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	base := nonIdent.ReplaceAllString(strings.ToLower(t.Name()), "_")
	base = strings.Trim(base, "_")
	if len(base) > 40 {
		base = base[len(base)-40:]
	}
	return "t_" + base + "_" + hex.EncodeToString(b[:])
}

// WrapMain wraps m so that, once its tests ran, the shared pool is closed
// and any server pgtest started is stopped. Pass the result to
// goleak.VerifyTestMain, or call its Run and os.Exit with the code.
func WrapMain(m *testing.M) interface{ Run() int } { return wrappedMain{m} }

type wrappedMain struct{ m *testing.M }

func (w wrappedMain) Run() int {
	code := w.m.Run()
	mu.Lock()
	defer mu.Unlock()
	closed = true
	if shared != nil {
		if shared.pool != nil {
			for _, name := range shared.free {
				_ = dropSchema(context.Background(), shared.pool, name)
			}
			shared.pool.Close()
		}
		if shared.stop != nil {
			shared.stop()
		}
	}
	return code
}

// waitPing is used by the Docker fallback: it retries until the server
// accepts connections or ctx ends.
func waitPing(ctx context.Context, cs, source string) (*server, error) {
	var last error
	for {
		s, err := connect(ctx, cs, source)
		if err == nil {
			return s, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
