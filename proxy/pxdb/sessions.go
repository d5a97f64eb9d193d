package pxdb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Session is a sign-in as the proxy checks it on each request: the user's cell and role as
// they are now, not as they were at sign-in.
type Session struct {
	ID        uuid.UUID
	User      User
	ExpiresAt time.Time
}

// CreateSession records a sign-in of user u from address, lasting ttl.
func (s *Store) CreateSession(ctx context.Context, u User, ttl time.Duration, address string) (Session, error) {
	ses := Session{ID: uuid.New(), User: u}
	err := s.pool.QueryRow(ctx, `
		INSERT INTO queen_proxy.sessions (id, user_name, address, expires_at)
		VALUES ($1, $2, $3, now() + make_interval(secs => $4)) RETURNING expires_at`,
		ses.ID, u.Name, address, ttl.Seconds()).Scan(&ses.ExpiresAt)
	if err != nil {
		return Session{}, fmt.Errorf("cannot record a session of %s: %w", u.Name, err)
	}
	return ses, nil
}

// LiveSession returns session id while it is neither ended nor expired and its user exists and
// is enabled; ErrNotFound otherwise.
func (s *Store) LiveSession(ctx context.Context, id uuid.UUID) (Session, error) {
	ses := Session{ID: id}
	err := s.pool.QueryRow(ctx, `
		SELECT s.expires_at, u.name, u.cell, u.role
		FROM queen_proxy.sessions s JOIN queen_proxy.users u ON u.name = s.user_name
		WHERE s.id = $1 AND s.revoked_at IS NULL AND s.expires_at > now() AND u.disabled_at IS NULL`, id).
		Scan(&ses.ExpiresAt, &ses.User.Name, &ses.User.Cell, &ses.User.Role)
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, fmt.Errorf("session %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Session{}, fmt.Errorf("cannot look up session %s: %w", id, err)
	}
	return ses, nil
}

// EndSession ends session id (a sign-out); ending an ended one does nothing.
func (s *Store) EndSession(ctx context.Context, id uuid.UUID) error {
	if _, err := s.pool.Exec(ctx, `UPDATE queen_proxy.sessions SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL`, id); err != nil {
		return fmt.Errorf("cannot end session %s: %w", id, err)
	}
	return nil
}

// DeleteExpiredSessions deletes sessions that expired more than a day ago.
func (s *Store) DeleteExpiredSessions(ctx context.Context) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM queen_proxy.sessions WHERE expires_at < now() - interval '1 day'`)
	if err != nil {
		return 0, fmt.Errorf("cannot delete expired sessions: %w", err)
	}
	return tag.RowsAffected(), nil
}
