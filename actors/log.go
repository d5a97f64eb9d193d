package actors

import (
	"context"
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"
)

// NewActorSystem creates a protoactor system that logs through log, warnings and above only:
// the library logs every actor start and dead letter at info, which only buries what matters.
func NewActorSystem(log *slog.Logger) *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(levelFloor{log.Handler(), slog.LevelWarn})
	}))
}

// levelFloor drops records below min before they reach the wrapped handler.
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
