package persistence

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// TxOp is one operation of an atomic transaction: a push of Items, or one Ack.
type TxOp struct {
	Push []PushItem
	Ack  *AckItem
}

// TxOpResult is the outcome of one TxOp.
type TxOpResult struct {
	Push []PushResult
	Ack  *AckResult
}

// txAbort carries the reason a transaction rolled back on purpose.
type txAbort struct{ reason string }

func (e txAbort) Error() string { return e.reason }

// Transaction applies ops in order in one PostgreSQL transaction. When an ack fails (unknown
// message, invalid lease) everything rolls back and reason says why; err is reserved for the
// database itself failing. Pushes de-duplicate as on the push route, so a retried transaction
// whose first attempt committed reports its pushes as duplicates instead of failing.
func (s *Store) Transaction(ctx context.Context, ops []TxOp) (results []TxOpResult, reason string, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		results = results[:0]
		for _, op := range ops {
			if op.Ack != nil {
				res, err := ackInTx(ctx, tx, []AckItem{*op.Ack}, nil, ackOptions{failedToDLQ: true})
				if err != nil {
					return err
				}
				results = append(results, TxOpResult{Ack: &res[0]})
				if !res[0].Success {
					return txAbort{"ACK operation failed: " + res[0].Error}
				}
				continue
			}
			res, err := pushInTx(ctx, tx, tx.Conn().TypeMap(), op.Push, pushOptions{lookUp: true}, s.sealer)
			if err != nil {
				return err
			}
			for _, r := range res {
				if r.Status == StatusFailed {
					results = append(results, TxOpResult{Push: res})
					return txAbort{"PUSH operation failed: " + r.Error}
				}
			}
			results = append(results, TxOpResult{Push: res})
		}
		return nil
	})
	var abort txAbort
	if errors.As(err, &abort) {
		return results, abort.reason, nil
	}
	if err != nil {
		return results, "", fmt.Errorf("cannot run transaction: %w", err)
	}
	return results, "", nil
}
