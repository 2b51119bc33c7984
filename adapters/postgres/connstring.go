package postgres

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/lib/pq"
)

// pgxOnlyParams are connection string parameters pgx and pgxpool understand
// and lib/pq does not; pq would send them to the server as run-time
// parameters, which the server rejects.
var pgxOnlyParams = map[string]bool{
	"default_query_exec_mode":    true,
	"description_cache_capacity": true,
	"min_read_buffer_size":       true,
	"statement_cache_capacity":   true,
}

func isPgxOnly(key string) bool {
	return pgxOnlyParams[key] || strings.HasPrefix(key, "pool_")
}

// listenerConnString turns the pool's connection string into one for the
// lib/pq listener: pgx-only parameters are dropped, and sslmode=prefer
// (pgx's default) is added when no sslmode is given, because lib/pq
// defaults to require. Both URL and key=value forms are accepted.
func listenerConnString(cs string) (string, error) {
	if cs == "" {
		return "", errors.New("the pool has no connection string; set Options.ConnString")
	}
	if strings.HasPrefix(cs, "postgres://") || strings.HasPrefix(cs, "postgresql://") {
		u, err := url.Parse(cs)
		if err != nil {
			return "", fmt.Errorf("parsing connection URL: %w", err)
		}
		q := u.Query()
		for key := range q {
			if isPgxOnly(key) {
				q.Del(key)
			}
		}
		if !q.Has("sslmode") {
			q.Set("sslmode", "prefer")
		}
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	pairs, err := parseKeywordValues(cs)
	if err != nil {
		return "", err
	}
	var (
		b       strings.Builder
		sslmode bool
	)
	for _, kv := range pairs {
		if isPgxOnly(kv[0]) {
			continue
		}
		sslmode = sslmode || kv[0] == "sslmode"
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(kv[0])
		b.WriteByte('=')
		b.WriteString(quoteValue(kv[1]))
	}
	if !sslmode {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("sslmode=prefer")
	}
	return b.String(), nil
}

// checkListenerConnString reports why lib/pq's listener cannot use cs, with
// pq's own parser, so that what New accepts is what the listener can dial:
// a string pq cannot parse (pq also reads the PG* environment variables, as
// when it dials), pgx-only parameters, which pq would send to the server as
// run-time parameters that the server rejects, and a list of hosts. pgx
// tries the hosts of a list in turn, and so does pq, but each picks its own:
// a listener connected to another server than the one the pool commits to
// (a standby, or an old primary after a failover) never receives the
// pool's notifications, so the listener must name the single host the pool
// writes to.
func checkListenerConnString(cs string) error {
	cfg, err := pq.NewConfig(cs)
	if err != nil {
		// A url.Error repeats the whole URL, password included.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("lib/pq cannot parse it: %w", err)
	}
	if len(cfg.Multi) > 0 {
		hosts := []string{cfg.Host}
		for _, m := range cfg.Multi {
			hosts = append(hosts, m.Host)
		}
		return fmt.Errorf("it lists %d hosts (%s), and lib/pq's listener may connect to another server than the pool, "+
			"whose notifications it would never receive: name the one host the pool writes to", len(hosts), strings.Join(hosts, ", "))
	}
	var pgxOnly []string
	for key := range cfg.Runtime {
		if isPgxOnly(key) {
			pgxOnly = append(pgxOnly, key)
		}
	}
	if len(pgxOnly) > 0 {
		slices.Sort(pgxOnly)
		return fmt.Errorf("it has parameters of pgx that lib/pq would send to the server, which rejects them: %s", strings.Join(pgxOnly, ", "))
	}
	return nil
}

// parseKeywordValues splits a libpq key=value connection string: values may
// be single-quoted, with backslash escaping a quote or a backslash.
func parseKeywordValues(s string) ([][2]string, error) {
	var out [][2]string
	i := 0
	skipSpace := func() {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
	}
	for {
		skipSpace()
		if i == len(s) {
			return out, nil
		}
		start := i
		for i < len(s) && s[i] != '=' && s[i] != ' ' {
			i++
		}
		key := s[start:i]
		skipSpace()
		if i == len(s) || s[i] != '=' || key == "" {
			return nil, fmt.Errorf("parsing connection string: missing \"=\" after %q", key)
		}
		i++
		skipSpace()
		var val strings.Builder
		if i < len(s) && s[i] == '\'' {
			i++
			for {
				if i == len(s) {
					return nil, errors.New("parsing connection string: unterminated quoted value")
				}
				c := s[i]
				i++
				if c == '\'' {
					break
				}
				if c == '\\' && i < len(s) {
					c = s[i]
					i++
				}
				val.WriteByte(c)
			}
		} else {
			for i < len(s) && !isSpace(s[i]) {
				c := s[i]
				i++
				if c == '\\' && i < len(s) {
					c = s[i]
					i++
				}
				val.WriteByte(c)
			}
		}
		out = append(out, [2]string{key, val.String()})
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// quoteValue quotes a key=value value when needed.
func quoteValue(v string) string {
	if v != "" && !strings.ContainsAny(v, " \t\n\r'\\") {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}
