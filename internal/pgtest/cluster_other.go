//go:build !unix

package pgtest

import (
	"context"
	"errors"
)

// startCluster is not supported off unix: initdb must not run as an
// administrator and dropping privileges needs unix credentials.
func startCluster(context.Context) (*server, error) {
	return nil, errors.New("ephemeral clusters are supported on unix only")
}
