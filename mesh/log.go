package mesh

import (
	"context"
	"log/slog"
)

// levelFloor drops records below min before they reach the wrapped handler (the actor library
// is chatty at info).
type levelFloor struct {
	slog.Handler
	min slog.Level
}

func (h levelFloor) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h levelFloor) WithAttrs(a []slog.Attr) slog.Handler {
	return levelFloor{h.Handler.WithAttrs(a), h.min}
}

func (h levelFloor) WithGroup(n string) slog.Handler {
	return levelFloor{h.Handler.WithGroup(n), h.min}
}
