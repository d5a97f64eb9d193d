package auth

import "time"

// Me is the answer of GET /auth/me, which the dashboard boots from: who is signed in and
// the broker access levels that amount to, so the dashboard offers what will be let through.
// The broker answers it for a bearer token (and, JWT off, for its standalone operator); the
// front door answers it for a person's session. One type, so both say it the same way.
type Me struct {
	Authenticated bool     `json:"authenticated"`
	AuthMode      string   `json:"authMode"` // "none" (JWT off) or "jwt"
	Subject       string   `json:"subject,omitempty"`
	Levels        []string `json:"levels"`
	// A front-door session: the person, the cell and role they are bound to, and when the
	// session ends.
	Username  string     `json:"username,omitempty"`
	Cell      string     `json:"cell,omitempty"`
	Role      string     `json:"role,omitempty"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}

// LevelsPassed names the access levels that pass says are passed, in their order: read-only,
// write-only, read-write, admin.
func LevelsPassed(pass func(Level) bool) []string {
	out := []string{}
	for _, l := range []Level{ReadOnly, WriteOnly, ReadWrite, Admin} {
		if pass(l) {
			out = append(out, l.String())
		}
	}
	return out
}
