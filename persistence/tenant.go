package persistence

import (
	"fmt"
	"strings"
)

// Tenancy (QUEEN_TENANCY_HEADER): a queue is known by its tenant and the name its tenant gives
// it, a QueueName. It is stored under one text, <tenant>\x1f<name> (U+001F, the unit
// separator), the default tenant's queues under their plain name: every statement that takes a
// queue name works unchanged, and two tenants' queues of the same name are different rows.
// That text is the queue's name wherever it leaves the process (the database, the spool
// records, the mesh frames, the payload envelopes' binding); inside, only the functions of this
// file convert. Listing statements take a Scope that keeps them to one tenant's queues.

// TenantSep separates the tenant from the name in a stored queue name. A queue name never
// contains it (the HTTP edge refuses one that does): it would address another tenant's queue.
const TenantSep = "\x1f"

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

// inScope is the SQL condition that the stored queue name col belongs to the tenant bound to
// param (Scope.Tenant): no separator for the default tenant, the tenant's prefix otherwise.
func inScope(col, param string) string {
	return `(CASE WHEN ` + param + `::text = '' THEN strpos(` + col + `, chr(31)) = 0 ELSE starts_with(` + col + `, ` + param + `::text || chr(31)) END)`
}

// unscoped is the SQL expression of a stored queue name without its tenant.
func unscoped(col string) string {
	return `split_part(` + col + `, chr(31), -1)`
}
