package persistence

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// QueuesByNamespace lists the queues of a namespace and/or task ("" matches any), highest
// priority first.
func (s *Store) QueuesByNamespace(ctx context.Context, namespace, task string) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT name FROM queen.queues
		WHERE ($1 = '' OR namespace = $1) AND ($2 = '' OR task = $2)
		ORDER BY priority DESC, name`, namespace, task)
	if err != nil {
		return nil, fmt.Errorf("cannot list queues of namespace %q task %q: %w", namespace, task, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("cannot list queues of namespace %q task %q: %w", namespace, task, err)
	}
	return names, nil
}
