package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"queen/migrations"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// CeilingConfig is the physical limit the broker works under: rows of the broker's message shape
// written straight into PostgreSQL with COPY, Batch rows per autocommitted CopyFrom, over Conns
// connections, spread over Partitions partitions, no broker involved.
type CeilingConfig struct {
	Batch      int           `json:"batch"`
	Size       int           `json:"size"`
	Conns      int           `json:"conns"`
	Partitions int           `json:"partitions"`
	Duration   time.Duration `json:"durationNs"`
	Warmup     time.Duration `json:"warmupNs"`
}

func (c CeilingConfig) label() string {
	return fmt.Sprintf("ceiling COPY %d×%dB c%d", c.Batch, c.Size, c.Conns)
}

var ceilingScenario = scenario{
	name:     "ceiling",
	help:     "raw PostgreSQL: COPY of the broker's message rows, no broker (the physical limit);\n--pg names the PostgreSQL when --url is given",
	own:      []string{"pg"},
	defaults: map[string]string{"conns": "4"},
	jobs:     func(o *options) []job { return []job{newJob("ceiling", o.ceiling(), RunCeiling)} },
}

func (o *options) ceiling() CeilingConfig {
	return CeilingConfig{Batch: o.batch, Size: o.size, Conns: o.conns, Partitions: o.partitions, Duration: o.duration, Warmup: o.warmup}
}

// ceilingSchema is the row-per-message table the broker stored messages in until migration
// 0006 (segments), its dedup index included, in a schema of its own so that the ceiling never
// touches the broker's tables: the per-row ceiling the standard scenarios are measured against.
func ceilingSchema() (string, error) {
	sql, err := fs.ReadFile(migrations.Files, "0001_core.sql")
	if err != nil {
		return "", fmt.Errorf("cannot read the broker's migrations: %w", err)
	}
	table := regexp.MustCompile(`(?s)CREATE TABLE queen\.messages \(.*?\n\);`).Find(sql)
	index := regexp.MustCompile(`CREATE UNIQUE INDEX \w+ ON queen\.messages \([^)]*\);`).Find(sql)
	if table == nil || index == nil {
		return "", errors.New("the broker's migrations no longer create queen.messages and its dedup index as the ceiling reads them")
	}
	ddl := strings.ReplaceAll(string(table)+"\n"+string(index), "queen.messages", "bench_ceiling.messages")
	return "DROP SCHEMA IF EXISTS bench_ceiling CASCADE;\nCREATE SCHEMA bench_ceiling;\n" + ddl, nil
}

var ceilingColumns = []string{"partition_id", "seq", "id", "transaction_id", "trace_id", "payload", "is_encrypted", "producer_sub"}

// ceilingRows feeds one batch to CopyFrom, building each row as it is asked for.
type ceilingRows struct {
	worker  int
	part    pgtype.UUID
	k       int
	seq     *int64 // the partition's next sequence number
	left    int
	size    int
	payload []byte
	tx      []byte
	row     []any
}

func (r *ceilingRows) Next() bool {
	if r.left == 0 {
		return false
	}
	r.left--
	s := *r.seq
	*r.seq++
	id, _ := uuid.NewV7()
	// The buffers are reused: CopyFrom encodes each row's values before asking for the next.
	r.payload = appendPayload(r.payload[:0], r.worker, s, r.k, r.size)
	r.tx = appendTxID(r.tx[:0], r.worker, s)
	r.row = append(r.row[:0], r.part, s, pgtype.UUID{Bytes: id, Valid: true}, string(r.tx), nil,
		json.RawMessage(r.payload), false, nil)
	return true
}

func (r *ceilingRows) Values() ([]any, error) { return r.row, nil }
func (r *ceilingRows) Err() error             { return nil }

// RunCeiling measures COPY into the ceiling table on the PostgreSQL behind the broker, then
// checks the table holds every row written and drops it.
func RunCeiling(ctx context.Context, t *Target, cfg CeilingConfig) (*Result, error) {
	if t.PGConn == "" {
		return nil, errors.New("no PostgreSQL to measure: give --pg when --url is a broker the bench did not start")
	}
	admin, err := pgx.Connect(ctx, t.PGConn)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to PostgreSQL: %w", err)
	}
	defer admin.Close(context.Background())
	schema, err := ceilingSchema()
	if err != nil {
		return nil, err
	}
	if _, err := admin.Exec(ctx, schema); err != nil {
		return nil, fmt.Errorf("cannot create the ceiling table: %w", err)
	}
	defer func() {
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS bench_ceiling CASCADE")
	}()

	conns := make([]*pgx.Conn, cfg.Conns)
	for i := range conns {
		if conns[i], err = pgx.Connect(ctx, t.PGConn); err != nil {
			return nil, fmt.Errorf("cannot connect to PostgreSQL: %w", err)
		}
		defer conns[i].Close(context.Background())
	}

	// Each connection owns its partitions, so sequence numbers never collide, as the
	// broker's per-partition lock guarantees.
	parts := max(cfg.Partitions, cfg.Conns)
	var errs errorCounts
	var rows, batches, written atomic.Int64
	lats := make([]latencies, cfg.Conns)
	w := startWindow(ctx, t, cfg.Warmup, cfg.Duration)
	stopProgress := startProgress(cfg.label(), w, func() string {
		return fmt.Sprintf("rows %s  errors %d", count(written.Load()), errs.total())
	})
	var wg sync.WaitGroup
	for i, conn := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []pgtype.UUID
			var seqs []int64
			for k := i; k < parts; k += cfg.Conns {
				mine = append(mine, pgtype.UUID{Bytes: uuid.New(), Valid: true})
				seqs = append(seqs, 1)
			}
			src := &ceilingRows{worker: i, size: cfg.Size}
			for n := 0; !w.over(); n++ {
				j := n % len(mine)
				src.part, src.k, src.seq, src.left = mine[j], i+j*cfg.Conns, &seqs[j], cfg.Batch
				sent := now()
				got, err := conn.CopyFrom(ctx, pgx.Identifier{"bench_ceiling", "messages"}, ceilingColumns, src)
				done := now()
				written.Add(got)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					errs.transport.Add(1)
					errs.firstIs(err.Error())
					// The batch was rolled back: its sequence numbers can be used again.
					seqs[j] -= int64(cfg.Batch) - got
					continue
				}
				if w.in(done) {
					lats[i] = append(lats[i], done-sent)
					rows.Add(got)
					batches.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	stopProgress()
	r := newResult("ceiling", cfg.label(), t, cfg)
	w.finish(r)
	r.setRates(rows.Load(), batches.Load())
	r.Latency = percentiles(lats...)
	r.note("req/s is CopyFrom batches per second, each its own transaction")

	var stored int64
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM bench_ceiling.messages").Scan(&stored); err != nil {
		return nil, fmt.Errorf("cannot count the ceiling rows: %w", err)
	}
	if stored != written.Load() {
		r.fail(fmt.Sprintf("COPY reported %d rows written but the table holds %d", written.Load(), stored))
	}
	if stored == 0 {
		r.fail("no row was written")
	}
	r.setErrors(&errs)
	return r.done(), nil
}
