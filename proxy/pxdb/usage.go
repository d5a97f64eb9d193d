package pxdb

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// AddKeyUsage adds admitted[i] requests of keys[i] to their totals of day (a UTC date) and
// returns each key's total after it, every proxy's requests included, in the order given.
func (s *Store) AddKeyUsage(ctx context.Context, day time.Time, keys []uuid.UUID, admitted []int64) ([]int64, error) {
	// In key order, so two proxies adding the same keys at once lock their rows in one order.
	rows, err := s.pool.Query(ctx, `
		INSERT INTO queen_proxy.key_usage AS u (key_id, day, requests)
		SELECT k, $1::date, n FROM unnest($2::uuid[], $3::int8[]) AS v(k, n) ORDER BY k
		ON CONFLICT (key_id, day) DO UPDATE SET requests = u.requests + EXCLUDED.requests
		RETURNING key_id, requests`, day.UTC().Format(time.DateOnly), keys, admitted)
	if err != nil {
		return nil, fmt.Errorf("cannot add API key usage: %w", err)
	}
	totals := map[uuid.UUID]int64{}
	var id uuid.UUID
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error {
		totals[id] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cannot add API key usage: %w", err)
	}
	out := make([]int64, len(keys))
	for i, k := range keys {
		out[i] = totals[k]
	}
	return out, nil
}
