package persistence

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Keys of the maintenance flags in queen.system_state, as the reference names them.
const (
	FlagPushMaintenance = "maintenance_mode"
	FlagPopMaintenance  = "pop_maintenance_mode"
)

// Flag reads a boolean flag of queen.system_state; an absent row is false.
func (s *Store) Flag(ctx context.Context, key string) (bool, error) {
	var enabled bool
	err := s.pool.QueryRow(ctx, `SELECT COALESCE((value->>'enabled')::boolean, false) FROM queen.system_state WHERE key = $1`, key).Scan(&enabled)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("cannot read flag %s: %w", key, err)
	}
	return enabled, nil
}

// SetFlag stores a boolean flag of queen.system_state.
func (s *Store) SetFlag(ctx context.Context, key string, enabled bool) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO queen.system_state (key, value, updated_at)
		VALUES ($1, jsonb_build_object('enabled', $2::boolean), now())
		ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()`, key, enabled)
	if err != nil {
		return fmt.Errorf("cannot store flag %s: %w", key, err)
	}
	return nil
}
