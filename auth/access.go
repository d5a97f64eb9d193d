package auth

// Level is a route's access level.
type Level int

// The five access levels. They are a set, not a ladder: write-only is not "more" or "less"
// than read-only, and neither passes the other's routes.
const (
	Public Level = iota
	ReadOnly
	WriteOnly
	ReadWrite
	Admin
)

func (l Level) String() string {
	switch l {
	case Public:
		return "public"
	case ReadOnly:
		return "read-only"
	case WriteOnly:
		return "write-only"
	case ReadWrite:
		return "read-write"
	case Admin:
		return "admin"
	}
	return "unknown"
}

// Roles is the set of roles a token holds.
type Roles uint8

// The four roles a token can hold (their spellings come from JWT_ROLE_*).
const (
	RoleReadOnly Roles = 1 << iota
	RoleWriteOnly
	RoleReadWrite
	RoleAdmin
)

// passes lists the roles that pass each level.
var passes = map[Level]Roles{
	ReadOnly:  RoleReadOnly | RoleReadWrite | RoleAdmin,
	WriteOnly: RoleWriteOnly | RoleReadWrite | RoleAdmin,
	ReadWrite: RoleReadWrite | RoleAdmin,
	Admin:     RoleAdmin,
}

// Allowed reports whether a token holding roles may use a route of level l. Public routes
// need nothing; an unknown level is refused.
func Allowed(l Level, roles Roles) bool {
	if l == Public {
		return true
	}
	return passes[l]&roles != 0
}
