package persistence

import "github.com/google/uuid"

// RingStep returns the settings of a wildcard pop's transaction, and the statement and
// arguments of the first step of its search when it resumes after partition after, for the
// test of its plan.
func RingStep(queueID uuid.UUID, queue QueueName, group, after string, chunk, want int) (settings, sql string, args []any) {
	w := newRingWalk(RingPosition{Queue: queueID, Partition: after, Claimed: true})
	return keyedPlans, ringStepSQL, ringStepArgs(queueID, queue.Stored(), group, w, chunk, want)
}

// DuplicateProbeSQL and AckedMessagesSQL look up messages by transactionId (a push's
// duplicates, an ack's messages), for the test of their plans.
const (
	DuplicateProbeSQL = duplicateProbeSQL
	LockPartitionsSQL = lockPartitionsSQL
	KeyedPlans        = keyedPlans
)

var AckedMessagesSQL = ackedMessagesSQL

// QueueBacklogSQL and GroupBacklogSQL are the backlog reads of ReadMetrics.
var (
	QueueBacklogSQL = queueBacklogSQL
	GroupBacklogSQL = groupBacklogSQL
)

// The statements that write consumer rows by (partition, group) pairs: an ack's lock and
// update, the one statement of an ack of this broker's leases, a pop's record of its leases
// over several partitions.
var (
	AckLockSQL         = ackLockSQL
	AckUpdateSQL       = ackUpdateSQL
	AckLeasedSQL       = ackLeasedSQL
	LeasedUpdateSQL    = claimEndsSQL(leasedEnds, true)
	LeasedUpdateOneSQL = claimEndsSQL(leasedEnds, false)
	ReleaseLeasesSQL   = releaseLeasesSQL
)

// WildcardClaims returns the settings a wildcard pop runs its claims under and the statement
// that claims several partitions at once, for the test of its plan.
func WildcardClaims() (settings []string, sql string) { return []string{keyedPlans}, claimManySQL }

// WildcardClaim returns the settings a wildcard pop runs its claims under and the statement of
// a claim of a partition the group has a row for (idle) or not, for the test of its plan.
func WildcardClaim(idle bool) (settings []string, sql string) {
	claim := claimNew
	if idle {
		claim = claimIdle
	}
	return []string{keyedPlans}, claimReadSQL(claim)
}
