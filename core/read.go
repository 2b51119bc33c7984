package core

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// Model is a perspective's stored model of one stream, decoded: what
// Perspective.Load and Perspective.Find return.
type Model[M any] struct {
	// StreamID is the stream the model folds.
	StreamID uuid.UUID
	// Value is the model, decoded as the engine encoded it.
	Value M
	// LastEventID and LastVersion are the last event reflected in Value:
	// Value is the fold of the stream's events up to LastVersion (the
	// dead-lettered ones excepted).
	LastEventID uuid.UUID
	LastVersion int64
	// UpdatedAt is when the model was last saved, on the backend's clock.
	UpdatedAt time.Time
}

// Load reads the perspective's model of a stream from models (a
// ports.Backend's Models) and decodes it into M the way the engine stored
// it. It returns an error wrapping ports.ErrNotFound when the stream has no
// model yet: no event of it was applied by this perspective. The
// perspective need not be registered, so a reader process that runs no
// Worker can call it.
//
// The model may lag the stream's latest events; Worker.WaitForStream waits
// until it reflects a given version.
func (p *Perspective[M]) Load(ctx context.Context, models ports.ModelStore, streamID uuid.UUID) (Model[M], error) {
	stored, err := models.ModelLoad(ctx, &ports.ModelLoadParams{StreamID: streamID, Perspective: p.name})
	if err != nil {
		return Model[M]{}, fmt.Errorf("loading model of perspective %q for stream %s: %w", p.name, streamID, err)
	}
	m, err := p.model(stored)
	if err != nil {
		return Model[M]{}, fmt.Errorf("loading %w", err)
	}
	return m, nil
}
