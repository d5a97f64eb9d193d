package persistence

import (
	"fmt"
	"strings"
)

// Tenancy (QUEEN_TENANCY_HEADER): a tenant's queue is stored under the internal name
// <tenant>\x1f<name> (U+001F, the unit separator); the default tenant's queues keep their plain
// name. Every statement that takes a queue name works unchanged, and two tenants' queues of the
// same name are different rows. Listing statements take a scope (ScopePrefix) that keeps them
// to one tenant's queues.

// TenantSep separates the tenant from the queue name in an internal name.
const TenantSep = "\x1f"

// InternalName is the stored name of tenant's queue name; the default tenant ("") keeps name.
func InternalName(tenant, name string) string {
	if tenant == "" {
		return name
	}
	return tenant + TenantSep + name
}

// SplitName splits a stored queue name into its tenant ("" for the default tenant) and the
// name the tenant knows.
func SplitName(internal string) (tenant, name string) {
	if i := strings.Index(internal, TenantSep); i >= 0 {
		return internal[:i], internal[i+1:]
	}
	return "", internal
}

// ScopePrefix is the scope of tenant's listings: the prefix of its internal names, "" for the
// default tenant (names without U+001F).
func ScopePrefix(tenant string) string {
	if tenant == "" {
		return ""
	}
	return tenant + TenantSep
}

// QueueName is a queue's identity. It is comparable, so it keys maps as it is.
type QueueName struct {
	Tenant string // "" for the default tenant
	Name   string // the name the tenant knows
}

// Stored is the text the queue is stored under: the SQL argument, the spool record's queue, the
// mesh's queue name and the payload envelopes' binding.
func (q QueueName) Stored() string {
	if q.Tenant == "" {
		return q.Name
	}
	return q.Tenant + TenantSep + q.Name
}

// String is the queue as an operator knows it, for logs and errors: tenant/name for a tenant's
// queue (a tenant id has no '/').
func (q QueueName) String() string {
	if q.Tenant == "" {
		return q.Name
	}
	return q.Tenant + "/" + q.Name
}

// ParseQueueName reads a stored queue name back, slicing it: Stored gives back the same text,
// whatever it holds.
func ParseQueueName(stored string) QueueName {
	if i := strings.Index(stored, TenantSep); i > 0 {
		return QueueName{Tenant: stored[:i], Name: stored[i+len(TenantSep):]}
	}
	return QueueName{Name: stored}
}

// Scan reads a queue name column into q (database/sql's Scanner, which pgx honours): rows read
// back carry QueueName, never the stored text. NULL is the zero QueueName.
func (q *QueueName) Scan(src any) error {
	switch v := src.(type) {
	case string:
		*q = ParseQueueName(v)
	case nil:
		*q = QueueName{}
	default:
		return fmt.Errorf("cannot read a queue name from %T", src)
	}
	return nil
}

// Scope is the tenant whose queues a listing, or a check by message or lease id, covers.
type Scope struct {
	Tenant string // "" for the default tenant
}

// Queue is the scope's queue called name.
func (s Scope) Queue(name string) QueueName { return QueueName{Tenant: s.Tenant, Name: name} }

// Owns reports whether q belongs to the scope's tenant.
func (s Scope) Owns(q QueueName) bool { return q.Tenant == s.Tenant }

// inScope is the SQL condition that the queue name col is in the scope bound to param.
func inScope(col, param string) string {
	return `(CASE WHEN ` + param + `::text = '' THEN strpos(` + col + `, chr(31)) = 0 ELSE starts_with(` + col + `, ` + param + `::text) END)`
}

// unscoped is the SQL expression of a stored queue name without its tenant.
func unscoped(col string) string {
	return `split_part(` + col + `, chr(31), -1)`
}
