// Package routes is the broker's route table as data: every route's method, path, access level
// (enforced by the broker when JWT is on) and class (what the front door grants a credential).
// The broker serves exactly these routes and the front door classifies against exactly these,
// so a route cannot reach one without the other knowing it.
package routes

import "queen/auth"

// Class is what a route does, the unit the front door grants a credential. Blocked is never
// granted: the front door forwards those routes to nobody.
type Class string

// Route classes (docs/proxy.md, "The route table").
const (
	Produce    Class = "produce"     // pushes
	Consume    Class = "consume"     // pops, acks, transactions, leases, stream cycles
	QueueAdmin Class = "queue_admin" // configure, delete, seek, replay: a tenant's own queues
	Read       Class = "read"        // listings, status, the dashboard shell
	Operator   Class = "operator"    // the cell itself: maintenance, the broker's figures
	Blocked    Class = "blocked"
)

// Grantable are the classes a credential can be granted, every one but Blocked.
var Grantable = []Class{Produce, Consume, QueueAdmin, Read, Operator}

// Route is one route of the broker. Path is a fasthttp/router pattern: {name} is one segment,
// {name:*} the rest.
type Route struct {
	Method, Path string
	Level        auth.Level
	Class        Class
}

// UnknownLevel is the access level of a request that matches no route.
const UnknownLevel = auth.ReadWrite

// Table is every route of the broker.
var Table = []Route{
	{"GET", "/health", auth.Public, Read},
	{"GET", "/status", auth.Public, Blocked},   // liveness of one broker process: the platform's, not a caller's
	{"GET", "/metrics", auth.Public, Operator}, // the dashboard's summary of the cell
	{"GET", "/metrics/prometheus", auth.Public, Operator},

	// The dashboard shell and the identity routes it boots with.
	{"GET", "/", auth.Public, Read},
	{"GET", "/assets/{file:*}", auth.Public, Read},
	{"GET", "/favicon.ico", auth.Public, Read},
	{"GET", "/auth/me", auth.Public, Read},
	{"GET", "/auth/login", auth.Public, Read},   // answered by the proxy (its sign-in page)
	{"POST", "/auth/logout", auth.Public, Read}, // answered by the proxy (ends the session)

	{"POST", "/api/v1/configure", auth.ReadWrite, QueueAdmin},
	{"POST", "/api/v1/push", auth.WriteOnly, Produce},
	{"GET", "/api/v1/pop", auth.ReadWrite, Blocked}, // a pop with no queue reaches every queue of a namespace
	{"GET", "/api/v1/pop/queue/{queue}", auth.ReadWrite, Consume},
	{"GET", "/api/v1/pop/queue/{queue}/partition/{partition}", auth.ReadWrite, Consume},
	{"POST", "/api/v1/ack", auth.ReadWrite, Consume},
	{"POST", "/api/v1/ack/batch", auth.ReadWrite, Consume},
	{"POST", "/api/v1/transaction", auth.ReadWrite, Consume},
	{"POST", "/api/v1/lease/{leaseId}/extend", auth.ReadWrite, Consume},

	{"POST", "/api/v1/traces", auth.ReadWrite, Consume},
	{"GET", "/api/v1/traces/names", auth.ReadOnly, Read},
	{"GET", "/api/v1/traces/by-name/{traceName}", auth.ReadOnly, Read},
	{"GET", "/api/v1/traces/{partitionId}/{transactionId}", auth.ReadOnly, Read},

	{"GET", "/api/v1/resources/queues", auth.ReadOnly, Read},
	{"GET", "/api/v1/resources/queues/{queue}", auth.ReadOnly, Read},
	{"DELETE", "/api/v1/resources/queues/{queue}", auth.Admin, QueueAdmin},
	{"GET", "/api/v1/messages", auth.ReadOnly, Read},
	{"GET", "/api/v1/messages/{partitionId}/{transactionId}", auth.ReadOnly, Read},
	{"DELETE", "/api/v1/messages/{partitionId}/{transactionId}", auth.ReadWrite, QueueAdmin},
	{"GET", "/api/v1/dlq", auth.ReadOnly, Read},
	{"POST", "/api/v1/dlq/{partitionId}/{transactionId}/replay", auth.Admin, QueueAdmin},

	{"GET", "/api/v1/consumer-groups", auth.ReadOnly, Read},
	{"GET", "/api/v1/consumer-groups/lagging", auth.ReadOnly, Read},
	{"GET", "/api/v1/consumer-groups/{group}", auth.ReadOnly, Read},
	{"DELETE", "/api/v1/consumer-groups/{group}", auth.Admin, QueueAdmin},
	{"POST", "/api/v1/consumer-groups/{group}/subscription", auth.ReadWrite, QueueAdmin},
	{"DELETE", "/api/v1/consumer-groups/{group}/queues/{queue}", auth.Admin, QueueAdmin},
	{"POST", "/api/v1/consumer-groups/{group}/queues/{queue}/seek", auth.ReadWrite, QueueAdmin},
	{"POST", "/api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek", auth.ReadWrite, QueueAdmin},

	// The dashboard's status and analytics, from the per-minute statistics (status.go,
	// analytics.go).
	{"GET", "/api/v1/status", auth.ReadOnly, Read},
	{"GET", "/api/v1/status/queues", auth.ReadOnly, Read},
	{"GET", "/api/v1/status/queues/{queue}", auth.ReadOnly, Read},
	{"GET", "/api/v1/status/queues/{queue}/messages", auth.ReadOnly, Read},
	{"GET", "/api/v1/status/analytics", auth.ReadOnly, Read},
	{"GET", "/api/v1/resources/overview", auth.ReadOnly, Read},
	{"GET", "/api/v1/resources/namespaces", auth.ReadOnly, Read},
	{"GET", "/api/v1/resources/tasks", auth.ReadOnly, Read},
	{"GET", "/api/v1/analytics/queue-lag", auth.ReadOnly, Read},
	{"GET", "/api/v1/analytics/queue-ops", auth.ReadOnly, Read},
	{"GET", "/api/v1/analytics/queue-parked-replicas", auth.ReadOnly, Read},
	{"GET", "/api/v1/analytics/retention", auth.ReadOnly, Read},
	{"GET", "/api/v1/analytics/system-metrics", auth.ReadOnly, Operator},
	{"GET", "/api/v1/analytics/worker-metrics", auth.ReadOnly, Operator},
	{"GET", "/api/v1/analytics/postgres-stats", auth.ReadOnly, Operator},
	{"POST", "/api/v1/stats/refresh", auth.Admin, Blocked},

	// The streaming SDKs' routes (streams.go).
	{"POST", "/streams/v1/queries", auth.ReadWrite, Consume},
	{"DELETE", "/streams/v1/queries/{query}", auth.Admin, QueueAdmin},
	{"POST", "/streams/v1/cycle", auth.ReadWrite, Consume},
	{"POST", "/streams/v1/state/get", auth.ReadOnly, Consume}, // a stream runner reads its own state

	{"GET", "/api/v1/status/buffers", auth.ReadOnly, Operator},
	{"GET", "/api/v1/system/maintenance", auth.Admin, Operator},
	{"POST", "/api/v1/system/maintenance", auth.Admin, Operator},
	{"GET", "/api/v1/system/maintenance/pop", auth.Admin, Operator},
	{"POST", "/api/v1/system/maintenance/pop", auth.Admin, Operator},
	{"GET", "/api/v1/system/shared-state", auth.Admin, Operator}, // the mesh as the dashboard shows it
	{"GET", "/internal/api/shared-state/stats", auth.Admin, Blocked},
	{"GET", "/internal/api/inter-instance/stats", auth.Admin, Blocked},
	{"POST", "/internal/api/notify", auth.Admin, Blocked},
}
