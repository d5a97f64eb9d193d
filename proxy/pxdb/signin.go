package pxdb

import (
	"context"
	"fmt"
	"time"
)

// SignInLimits bound failed sign-ins: at most PerUser for one user name and PerAddress from one
// address within Window, counted from the first failure of the window, across every proxy.
type SignInLimits struct {
	PerUser, PerAddress int
	Window              time.Duration
}

func userSubject(name string) string       { return "user:" + name }
func addressSubject(address string) string { return "address:" + address }

// SignInBlocked returns how long sign-ins of user from address stay refused: 0 when they may
// be tried.
func (s *Store) SignInBlocked(ctx context.Context, user, address string, l SignInLimits) (time.Duration, error) {
	var secs float64
	err := s.pool.QueryRow(ctx, `
		SELECT COALESCE(max(extract(epoch FROM window_start + make_interval(secs => $3) - now())), 0)
		FROM queen_proxy.sign_in_failures
		WHERE window_start > now() - make_interval(secs => $3)
		  AND ((subject = $1 AND failures >= $4) OR (subject = $2 AND failures >= $5))`,
		userSubject(user), addressSubject(address), l.Window.Seconds(), l.PerUser, l.PerAddress).Scan(&secs)
	if err != nil {
		return 0, fmt.Errorf("cannot read the sign-in failures of %s from %s: %w", user, address, err)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// SignInFailed counts a failed sign-in of user from address. A window that has passed starts
// over with this failure.
func (s *Store) SignInFailed(ctx context.Context, user, address string, l SignInLimits) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO queen_proxy.sign_in_failures AS f (subject, window_start, failures)
		SELECT subject, now(), 1 FROM unnest($1::text[]) AS subject ORDER BY subject
		ON CONFLICT (subject) DO UPDATE SET
			failures = CASE WHEN f.window_start <= now() - make_interval(secs => $2) THEN 1 ELSE f.failures + 1 END,
			window_start = CASE WHEN f.window_start <= now() - make_interval(secs => $2) THEN now() ELSE f.window_start END`,
		[]string{userSubject(user), addressSubject(address)}, l.Window.Seconds())
	if err != nil {
		return fmt.Errorf("cannot count a failed sign-in of %s from %s: %w", user, address, err)
	}
	return nil
}

// SignInSucceeded clears the user's failures; the address's stay counted.
func (s *Store) SignInSucceeded(ctx context.Context, user string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM queen_proxy.sign_in_failures WHERE subject = $1`, userSubject(user)); err != nil {
		return fmt.Errorf("cannot clear the sign-in failures of %s: %w", user, err)
	}
	return nil
}

// DeleteOldSignInFailures deletes the windows that passed before window ago.
func (s *Store) DeleteOldSignInFailures(ctx context.Context, window time.Duration) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM queen_proxy.sign_in_failures WHERE window_start < now() - make_interval(secs => $1)`, window.Seconds())
	if err != nil {
		return fmt.Errorf("cannot delete old sign-in failures: %w", err)
	}
	return nil
}
