package persistence

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// LeaseResult is the outcome of a lease renewal.
type LeaseResult struct {
	Success   bool
	Error     string
	ExpiresAt *time.Time // the earliest new expiry when the lease covers several partitions
}

// ExtendLease pushes the expiry of every partition held under leaseID to at least now+d. It
// never shortens a lease and cannot revive an expired one. Only partitions of queues in scope
// count: another tenant's lease is "not found", as one that does not exist.
func (s *Store) ExtendLease(ctx context.Context, scope Scope, leaseID uuid.UUID, d time.Duration) (LeaseResult, error) {
	var r LeaseResult
	var holders int
	err := s.pool.QueryRow(ctx, `
		WITH held AS (
			SELECT pc.partition_id, pc.consumer_group
			FROM queen.partition_consumers pc
			JOIN queen.partitions p ON p.id = pc.partition_id
			JOIN queen.queues q ON q.id = p.queue_id
			WHERE pc.lease_id = $1 AND `+inScope("q.name", "$3")+`),
		upd AS (
			UPDATE queen.partition_consumers pc
			SET lease_expires_at = GREATEST(pc.lease_expires_at, now() + make_interval(secs => $2))
			FROM held h
			WHERE pc.partition_id = h.partition_id AND pc.consumer_group = h.consumer_group
				AND pc.lease_id = $1 AND pc.lease_expires_at > now()
			RETURNING pc.lease_expires_at)
		SELECT (SELECT min(lease_expires_at) FROM upd), (SELECT count(*) FROM held)`,
		leaseID, d.Seconds(), scope.Tenant).Scan(&r.ExpiresAt, &holders)
	if err != nil {
		return r, fmt.Errorf("cannot extend lease %s: %w", leaseID, err)
	}
	switch {
	case r.ExpiresAt != nil:
		r.Success = true
	case holders > 0:
		r.Error = "Lease already expired"
	default:
		r.Error = "Lease not found"
	}
	return r, nil
}

// ReleaseLeases frees the partitions held under leaseIDs: the leases of pops whose clients got
// an error, which may have been committed after all when the database came back.
func (s *Store) ReleaseLeases(ctx context.Context, leaseIDs []uuid.UUID) (int64, error) {
	ids := make([][16]byte, len(leaseIDs))
	for i, id := range leaseIDs {
		ids[i] = id
	}
	tag, err := s.pool.Exec(ctx, `UPDATE queen.partition_consumers
		SET lease_id = NULL, lease_expires_at = NULL, lease_end_seq = 0
		WHERE lease_id = ANY($1::uuid[])`, ids)
	if err != nil {
		return 0, fmt.Errorf("cannot release %d orphaned leases: %w", len(leaseIDs), err)
	}
	return tag.RowsAffected(), nil
}
