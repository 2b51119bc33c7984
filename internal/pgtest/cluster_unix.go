//go:build unix

package pgtest

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
)

// clusterUser is the user a cluster's binaries run as: the postgres user
// when running as root (CI containers), since initdb refuses root; the
// current user otherwise (cred nil).
type clusterUser struct {
	cred *syscall.Credential
}

func lookupClusterUser() (clusterUser, error) {
	if os.Geteuid() != 0 {
		return clusterUser{}, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return clusterUser{}, fmt.Errorf("running as root and no postgres user to run initdb as: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return clusterUser{}, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return clusterUser{}, err
	}
	return clusterUser{cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}, nil
}

// own gives path to the user.
func (u clusterUser) own(path string) error {
	if u.cred == nil {
		return nil
	}
	return os.Chown(path, int(u.cred.Uid), int(u.cred.Gid))
}

// apply makes cmd run as the user.
func (u clusterUser) apply(cmd *exec.Cmd) {
	if u.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: u.cred}
	}
}
