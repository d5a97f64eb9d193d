package pxdb

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// User is a person who signs in to the proxy, bound to one cell with one role.
type User struct {
	Name string
	Cell string
	Role string // reader, writer or operator: see RoleClasses
}

// roles maps each user role to the classes it grants.
var roles = map[string][]string{
	"reader":   {"read"},
	"writer":   {"produce", "consume", "read"},
	"operator": {"produce", "consume", "queue_admin", "read", "operator"},
}

// RoleClasses returns the classes that a user role grants, and whether the role exists.
func RoleClasses(role string) ([]string, bool) {
	c, ok := roles[role]
	return slices.Clone(c), ok
}

// userName allows e-mail addresses as names.
var userName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}$`)

const minPasswordLen = 12

// AddUser adds a user with password, stored as an argon2id hash. ErrNoCell when the cell does
// not exist, ErrExists when the name is taken. Audited.
func (s *Store) AddUser(ctx context.Context, u User, password string, by Actor) error {
	if err := checkActor(by); err != nil {
		return err
	}
	if !userName.MatchString(u.Name) {
		return invalid("user name %q must be letters, digits and _.@+-, at most 128, starting with a letter or digit", u.Name)
	}
	if _, ok := roles[u.Role]; !ok {
		return invalid("role %q must be reader, writer or operator", u.Role)
	}
	if utf8.RuneCountInString(password) < minPasswordLen {
		return invalid("the password must have at least %d characters", minPasswordLen)
	}
	// Hashed before the transaction: it takes a while and needs no row.
	hash, err := hashPassword(ctx, password)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			INSERT INTO queen_proxy.users (name, cell, role, password_hash) VALUES ($1, $2, $3, $4)
			ON CONFLICT (name) DO NOTHING`, u.Name, u.Cell, u.Role, hash)
		if isCode(err, foreignKeyViolation) {
			return fmt.Errorf("cell %s: %w", u.Cell, ErrNoCell)
		}
		if err != nil {
			return fmt.Errorf("cannot add user %s: %w", u.Name, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("user %s: %w", u.Name, ErrExists)
		}
		return audit(ctx, tx, by, "add_user", "user/"+u.Name, u.Cell)
	})
}

// CheckPassword returns the user when password is theirs, ErrBadCredentials when the user does
// not exist, is disabled or the password is wrong. Both take the time of one hash, so the answer's timing
// does not tell whether the name exists.
func (s *Store) CheckPassword(ctx context.Context, name, password string) (User, error) {
	u := User{Name: name}
	var stored string
	var disabled bool
	err := s.pool.QueryRow(ctx, `SELECT cell, role, password_hash, disabled_at IS NOT NULL FROM queen_proxy.users WHERE name = $1`, name).
		Scan(&u.Cell, &u.Role, &stored, &disabled)
	known := err == nil && !disabled
	if errors.Is(err, pgx.ErrNoRows) {
		stored = dummyHash
	} else if err != nil {
		return User{}, fmt.Errorf("cannot look up user %s: %w", name, err)
	}
	ok, err := verifyPassword(ctx, password, stored)
	if err != nil {
		return User{}, fmt.Errorf("user %s: %w", name, err)
	}
	if !ok || !known {
		return User{}, ErrBadCredentials
	}
	return u, nil
}

// SetUserDisabled disables user name, ending its sessions on every proxy, or enables it again;
// ErrNotFound when there is no such user. Audited.
func (s *Store) SetUserDisabled(ctx context.Context, name string, disabled bool, by Actor) error {
	if err := checkActor(by); err != nil {
		return err
	}
	action := map[bool]string{true: "disable_user", false: "enable_user"}[disabled]
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var cell string
		err := tx.QueryRow(ctx, `
			UPDATE queen_proxy.users SET disabled_at = CASE WHEN $2 THEN COALESCE(disabled_at, now()) END
			WHERE name = $1 RETURNING cell`, name, disabled).Scan(&cell)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("user %s: %w", name, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("cannot %s %s: %w", strings.ReplaceAll(action, "_", " "), name, err)
		}
		if disabled {
			if _, err := tx.Exec(ctx, `UPDATE queen_proxy.sessions SET revoked_at = now()
				WHERE user_name = $1 AND revoked_at IS NULL`, name); err != nil {
				return fmt.Errorf("cannot end the sessions of %s: %w", name, err)
			}
		}
		return audit(ctx, tx, by, action, "user/"+name, cell)
	})
}
