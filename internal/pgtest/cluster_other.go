//go:build !unix

package pgtest

import (
	"errors"
	"os/exec"
)

// clusterUser is not supported off unix: initdb must not run as an
// administrator and dropping privileges needs unix credentials.
type clusterUser struct{}

func lookupClusterUser() (clusterUser, error) {
	return clusterUser{}, errors.New("ephemeral clusters are supported on unix only")
}

func (clusterUser) own(string) error { return nil }

func (clusterUser) apply(*exec.Cmd) {}
