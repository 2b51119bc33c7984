package pgtest

import (
	"context"
	"fmt"

	"github.com/ory/dockertest/v3"
	"github.com/ory/dockertest/v3/docker"
)

// startDocker starts a throw-away postgres container, for developers with
// Docker and no database. The container removes itself when stopped and
// expires after an hour should the test process die without stopping it.
func startDocker(ctx context.Context) (*server, error) {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return nil, err
	}
	if err := pool.Client.Ping(); err != nil {
		return nil, fmt.Errorf("no Docker engine: %w", err)
	}
	res, err := pool.RunWithOptions(&dockertest.RunOptions{
		Repository: "postgres",
		Tag:        "15-alpine",
		Env: []string{
			"POSTGRES_USER=postgres",
			"POSTGRES_DB=test",
			"POSTGRES_HOST_AUTH_METHOD=trust",
		},
		Cmd: []string{"postgres", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "max_connections=300"},
	}, func(hc *docker.HostConfig) {
		hc.AutoRemove = true
		hc.RestartPolicy = docker.RestartPolicy{Name: "no"}
	})
	if err != nil {
		return nil, fmt.Errorf("starting postgres container: %w", err)
	}
	_ = res.Expire(3600)
	stop := func() { _ = pool.Purge(res) }
	cs := fmt.Sprintf("postgres://postgres@%s/test?sslmode=disable", res.GetHostPort("5432/tcp"))
	s, err := waitPing(ctx, cs, "docker container "+res.Container.Name)
	if err != nil {
		stop()
		return nil, err
	}
	s.stop = stop
	return s, nil
}
