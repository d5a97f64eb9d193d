package auth

import (
	"slices"
	"testing"
)

// The levels an identity names come in one order, whoever computes them: the broker from a
// token's roles, the front door from a session's classes.
func TestLevelsPassed(t *testing.T) {
	for _, tc := range []struct {
		roles Roles
		want  []string
	}{
		{0, []string{}},
		{RoleReadOnly, []string{"read-only"}},
		{RoleWriteOnly | RoleReadOnly, []string{"read-only", "write-only"}},
		{RoleReadWrite, []string{"read-only", "write-only", "read-write"}},
		{RoleAdmin, []string{"read-only", "write-only", "read-write", "admin"}},
	} {
		got := LevelsPassed(func(l Level) bool { return Allowed(l, tc.roles) })
		if !slices.Equal(got, tc.want) {
			t.Errorf("roles %b: %v, want %v", tc.roles, got, tc.want)
		}
	}
}
