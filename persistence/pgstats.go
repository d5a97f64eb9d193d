package persistence

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// PostgresStats is what PostgreSQL's statistics views say of the broker's tables (schema
// queen) and of its database, each part as the JSON the analytics route sends.
type PostgresStats struct {
	Database         string
	DatabaseCache    json.RawMessage // cache hits and disk reads of the database
	TableCache       json.RawMessage // the same per table
	IndexCache       json.RawMessage // per index, the 20 with the most disk reads
	CacheSummary     json.RawMessage // tables and indexes together
	DeadTuples       json.RawMessage // tables with dead tuples, the 15 with the most
	HotUpdates       json.RawMessage // tables with updates and the share that was HOT, the 15 with the most
	ActiveQueries    json.RawMessage // statements of the database running for more than a second, 10 at most
	AutovacuumStatus json.RawMessage // tables with more than 1000 dead tuples, 10 at most
	BufferConfig     json.RawMessage // shared_buffers
	BufferUsage      json.RawMessage // the tables' pages in shared buffers (needs pg_buffercache; [] without)
	TableSizes       json.RawMessage // the 20 largest tables
}

// ratio is a percentage of hits over hits plus reads, rounded to hundredths; NULL when both are 0.
func ratio(hits, reads string) string {
	return `round(` + hits + `::numeric * 100 / NULLIF(` + hits + ` + ` + reads + `, 0), 2)`
}

// PostgresStats reads the statistics views in one round trip (and a second one for the buffer
// usage when pg_buffercache is installed).
func (s *Store) PostgresStats(ctx context.Context) (PostgresStats, error) {
	var p PostgresStats
	b := &pgx.Batch{}
	b.Queue(`SELECT current_database()`)
	b.Queue(`SELECT json_build_object('cacheHitRatio', ` + ratio("blks_hit", "blks_read") + `, 'cacheHits', blks_hit,
			'database', datname, 'diskReads', blks_read)
		FROM pg_stat_database WHERE datname = current_database()`)
	b.Queue(`SELECT COALESCE(json_agg(json_build_object('cacheHitRatio', ` + ratio("heap_blks_hit", "heap_blks_read") + `,
			'cacheHits', heap_blks_hit, 'diskReads', heap_blks_read, 'schema', schemaname, 'table', relname)
			ORDER BY heap_blks_read DESC, relname), '[]')
		FROM pg_statio_user_tables WHERE schemaname = 'queen'`)
	b.Queue(`SELECT COALESCE(json_agg(t.o ORDER BY t.reads DESC, t.name), '[]') FROM (
			SELECT json_build_object('cacheHitRatio', ` + ratio("idx_blks_hit", "idx_blks_read") + `, 'cacheHits', idx_blks_hit,
				'diskReads', idx_blks_read, 'index', indexrelname, 'schema', schemaname, 'table', relname) AS o,
				idx_blks_read AS reads, indexrelname AS name
			FROM pg_statio_user_indexes WHERE schemaname = 'queen'
			ORDER BY idx_blks_read DESC, indexrelname LIMIT 20) t`)
	b.Queue(`SELECT json_build_object(
			'indexes', (SELECT json_build_object('cacheHits', COALESCE(sum(idx_blks_hit), 0), 'diskReads', COALESCE(sum(idx_blks_read), 0),
				'hitRatio', ` + ratio("sum(idx_blks_hit)", "sum(idx_blks_read)") + `)
				FROM pg_statio_user_indexes WHERE schemaname = 'queen'),
			'tables', (SELECT json_build_object('cacheHits', COALESCE(sum(heap_blks_hit), 0), 'diskReads', COALESCE(sum(heap_blks_read), 0),
				'hitRatio', ` + ratio("sum(heap_blks_hit)", "sum(heap_blks_read)") + `)
				FROM pg_statio_user_tables WHERE schemaname = 'queen'))`)
	b.Queue(`SELECT COALESCE(json_agg(t.o ORDER BY t.dead DESC, t.name), '[]') FROM (
			SELECT json_build_object('deadPercentage', round(n_dead_tup::numeric * 100 / NULLIF(n_live_tup, 0), 2),
				'deadTuples', n_dead_tup, 'lastAutovacuum', to_char(last_autovacuum, 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
				'lastVacuum', to_char(last_vacuum, 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), 'liveTuples', n_live_tup,
				'schema', schemaname, 'table', relname) AS o, n_dead_tup AS dead, relname AS name
			FROM pg_stat_user_tables WHERE schemaname = 'queen' AND n_dead_tup > 0
			ORDER BY n_dead_tup DESC, relname LIMIT 15) t`)
	b.Queue(`SELECT COALESCE(json_agg(t.o ORDER BY t.updates DESC, t.name), '[]') FROM (
			SELECT json_build_object('hotUpdatePercentage', round(n_tup_hot_upd::numeric * 100 / NULLIF(n_tup_upd, 0), 2),
				'hotUpdates', n_tup_hot_upd, 'schema', schemaname, 'table', relname, 'totalUpdates', n_tup_upd) AS o,
				n_tup_upd AS updates, relname AS name
			FROM pg_stat_user_tables WHERE schemaname = 'queen' AND n_tup_upd > 0
			ORDER BY n_tup_upd DESC, relname LIMIT 15) t`)
	b.Queue(`SELECT COALESCE(json_agg(t.o ORDER BY t.started), '[]') FROM (
			SELECT json_build_object('duration', extract(epoch FROM now() - query_start), 'pid', pid,
				'query', left(query, 200), 'state', state, 'waitEvent', wait_event, 'waitEventType', wait_event_type) AS o,
				query_start AS started
			FROM pg_stat_activity
			WHERE datname = current_database() AND state <> 'idle' AND pid <> pg_backend_pid()
			  AND query_start < now() - interval '1 second'
			ORDER BY query_start LIMIT 10) t`)
	b.Queue(`SELECT COALESCE(json_agg(t.o ORDER BY t.dead DESC, t.name), '[]') FROM (
			SELECT json_build_object('autoanalyzeCount', autoanalyze_count, 'autovacuumCount', autovacuum_count,
				'deadTuples', n_dead_tup, 'lastAutovacuum', to_char(last_autovacuum, 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
				'table', relname) AS o, n_dead_tup AS dead, relname AS name
			FROM pg_stat_user_tables WHERE schemaname = 'queen' AND n_dead_tup > 1000
			ORDER BY n_dead_tup DESC, relname LIMIT 10) t`)
	b.Queue(`SELECT json_build_object('sharedBuffers', setting,
			'sharedBuffersSize', pg_size_pretty(setting::bigint * current_setting('block_size')::bigint))
		FROM pg_settings WHERE name = 'shared_buffers'`)
	b.Queue(`SELECT COALESCE(json_agg(t.o ORDER BY t.size DESC, t.name), '[]') FROM (
			SELECT json_build_object('indexSize', pg_size_pretty(pg_indexes_size(c.oid)), 'indexSizeBytes', pg_indexes_size(c.oid),
				'table', c.relname, 'tableSize', pg_size_pretty(pg_relation_size(c.oid)), 'tableSizeBytes', pg_relation_size(c.oid),
				'totalSize', pg_size_pretty(pg_total_relation_size(c.oid)), 'totalSizeBytes', pg_total_relation_size(c.oid)) AS o,
				pg_total_relation_size(c.oid) AS size, c.relname AS name
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'queen' AND c.relkind = 'r'
			ORDER BY pg_total_relation_size(c.oid) DESC, c.relname LIMIT 20) t`)
	b.Queue(`SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_buffercache')`)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	var buffercache bool
	targets := []any{&p.Database, &p.DatabaseCache, &p.TableCache, &p.IndexCache, &p.CacheSummary, &p.DeadTuples,
		&p.HotUpdates, &p.ActiveQueries, &p.AutovacuumStatus, &p.BufferConfig, &p.TableSizes, &buffercache}
	for _, t := range targets {
		if err := br.QueryRow().Scan(t); err != nil {
			return p, fmt.Errorf("cannot read PostgreSQL's statistics: %w", err)
		}
	}
	if err := br.Close(); err != nil {
		return p, fmt.Errorf("cannot read PostgreSQL's statistics: %w", err)
	}
	p.BufferUsage = json.RawMessage(`[]`)
	if !buffercache {
		return p, nil
	}
	err := s.pool.QueryRow(ctx, `SELECT COALESCE(json_agg(json_build_object('bufferedBytes', t.n * t.block,
			'bufferedSize', pg_size_pretty(t.n * t.block), 'object', t.name,
			'percentOfCache', round(t.n::numeric * 100 / (SELECT setting::bigint FROM pg_settings WHERE name = 'shared_buffers'), 2))
			ORDER BY t.n DESC, t.name), '[]') FROM (
			SELECT c.relname AS name, count(*) AS n, current_setting('block_size')::bigint AS block
			FROM pg_buffercache b JOIN pg_class c ON b.relfilenode = pg_relation_filenode(c.oid)
			WHERE c.relnamespace = 'queen'::regnamespace
			GROUP BY c.relname ORDER BY count(*) DESC, c.relname LIMIT 20) t`).Scan(&p.BufferUsage)
	if err != nil {
		return p, fmt.Errorf("cannot read the buffer usage (pg_buffercache): %w", err)
	}
	return p, nil
}
