package persistence

import "strings"

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

// inScope is the SQL condition that the queue name col is in the scope bound to param.
func inScope(col, param string) string {
	return `(CASE WHEN ` + param + `::text = '' THEN strpos(` + col + `, chr(31)) = 0 ELSE starts_with(` + col + `, ` + param + `::text) END)`
}

// unscoped is the SQL expression of a stored queue name without its tenant.
func unscoped(col string) string {
	return `split_part(` + col + `, chr(31), -1)`
}
