package ports_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

func TestValidateNamesTheField(t *testing.T) {
	t.Parallel()

	err := (&ports.WorkClaimParams{InstanceID: uuid.New(), LeaseDuration: 1, StaleThreshold: 1}).Validate()
	if !errors.Is(err, ports.ErrInvalidArgument) {
		t.Fatalf("want ErrInvalidArgument, got %v", err)
	}
	const want = "ports: WorkClaimParams.MaxStreams must be positive, got 0: invalid argument"
	if err.Error() != want {
		t.Fatalf("want %q, got %q", want, err.Error())
	}
	valid := &ports.WorkClaimParams{InstanceID: uuid.New(), MaxStreams: 1, LeaseDuration: 1, StaleThreshold: 1}
	if err := valid.Validate(); err != nil {
		t.Fatalf("valid params rejected: %v", err)
	}
}
