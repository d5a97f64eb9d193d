package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// MessageStatus is where a message of the message browser stands, derived from the cursors,
// leases and dead letters of its partition (messageState).
type MessageStatus string

// Message statuses.
const (
	MessagePending    MessageStatus = "pending"
	MessageProcessing MessageStatus = "processing"
	MessageCompleted  MessageStatus = "completed"
	MessageDeadLetter MessageStatus = "dead_letter"
)

// messageState joins, for every message m, its partition p, queue q, the __QUEUE_MODE__ cursor
// row qm, the named groups' positions (bus), the newest dead-letter entry (dl), and derives:
//
//   - status: dead_letter when the message has any dead-letter entry; else, when the partition
//     has a queue-mode cursor, completed at or before it, processing inside its active lease,
//     pending otherwise; else, for a partition read only by named groups, completed once every
//     group's cursor passed it, processing inside one of their active leases, pending otherwise;
//   - lease_expires_at: the expiry of the lease covering the message, if any.
//
// The caller puts the FROM that yields m before it: queen.messages to browse, messageByTransaction
// for one message.
const messageState = `
	JOIN queen.partitions p ON p.id = m.partition_id
	JOIN queen.queues q ON q.id = p.queue_id
	LEFT JOIN queen.partition_consumers qm ON qm.partition_id = m.partition_id AND qm.consumer_group = '__QUEUE_MODE__'
	CROSS JOIN LATERAL (
		SELECT count(*) AS groups,
		       count(*) FILTER (WHERE pc.cursor_seq >= m.seq) AS consumed,
		       min(pc.lease_expires_at) FILTER (
		           WHERE pc.lease_expires_at > now() AND m.seq > pc.cursor_seq AND m.seq <= pc.lease_end_seq) AS lease
		FROM queen.partition_consumers pc
		WHERE pc.partition_id = m.partition_id AND pc.consumer_group <> '__QUEUE_MODE__') bus
	LEFT JOIN LATERAL (
		SELECT d.error_message, d.retry_count FROM queen.dead_letter_queue d
		WHERE d.partition_id = m.partition_id AND d.message_seq = m.seq
		ORDER BY d.failed_at DESC LIMIT 1) dl ON true
	CROSS JOIN LATERAL (
		SELECT CASE WHEN qm.lease_expires_at > now() AND m.seq > qm.cursor_seq AND m.seq <= qm.lease_end_seq
		            THEN qm.lease_expires_at END AS lease) ql
	CROSS JOIN LATERAL (
		SELECT CASE
		         WHEN dl.retry_count IS NOT NULL THEN 'dead_letter'
		         WHEN qm.partition_id IS NOT NULL THEN
		             CASE WHEN m.seq <= qm.cursor_seq THEN 'completed'
		                  WHEN ql.lease IS NOT NULL THEN 'processing' ELSE 'pending' END
		         WHEN bus.groups > 0 THEN
		             CASE WHEN bus.consumed = bus.groups THEN 'completed'
		                  WHEN bus.lease IS NOT NULL THEN 'processing' ELSE 'pending' END
		         ELSE 'pending' END AS status,
		       CASE WHEN qm.partition_id IS NOT NULL THEN ql.lease ELSE bus.lease END AS lease_expires_at) st`

// messageByTransaction yields the message m of transactionId t.transaction_id in partition
// t.partition_id: a probe of message_transactions' key and a read of the segment holding it,
// where the queen.messages view would unnest the whole partition.
const messageByTransaction = `FROM queen.message_transactions t CROSS JOIN LATERAL queen.message_at(t.partition_id, t.seq) m`

// messageColumns are the columns of MessageInfo, in scan order.
const messageColumns = `m.id, m.transaction_id, m.partition_id, q.name, p.name, q.namespace, q.task, m.trace_id,
	COALESCE(m.producer_sub, ''), q.priority, m.created_at, st.status, st.lease_expires_at, bus.groups, bus.consumed`

// MessageInfo is one message of the message browser (no payload).
type MessageInfo struct {
	ID             uuid.UUID
	TransactionID  string
	PartitionID    uuid.UUID
	Queue          QueueName
	Partition      string
	Namespace      string
	Task           string
	TraceID        uuid.NullUUID
	ProducerSub    string // "" when none (see PushItem)
	QueuePriority  int
	CreatedAt      time.Time
	Status         MessageStatus
	LeaseExpiresAt *time.Time
	BusGroups      int64 // named consumer groups with a cursor on the partition
	ConsumedBy     int64 // how many of them consumed the message
}

func (m *MessageInfo) scanTargets() []any {
	return []any{&m.ID, &m.TransactionID, &m.PartitionID, &m.Queue, &m.Partition, &m.Namespace, &m.Task, &m.TraceID,
		&m.ProducerSub, &m.QueuePriority, &m.CreatedAt, &m.Status, &m.LeaseExpiresAt, &m.BusGroups, &m.ConsumedBy}
}

// ConsumptionMode says how the partitions in scope are consumed.
type ConsumptionMode struct {
	HasQueueMode bool
	BusGroups    int64
}

// Type is queue, bus, hybrid or none.
func (m ConsumptionMode) Type() string {
	switch {
	case m.HasQueueMode && m.BusGroups > 0:
		return "hybrid"
	case m.HasQueueMode:
		return "queue"
	case m.BusGroups > 0:
		return "bus"
	}
	return "none"
}

// MessageFilter selects messages of the browser; empty strings and the zero QueueName match
// anything.
type MessageFilter struct {
	Scope     Scope // the caller's tenant
	Queue     QueueName
	Partition string
	Namespace string
	Task      string
	Status    MessageStatus // "" matches any
	From      *time.Time    // created_at, inclusive; nil: an hour ago (database clock)
	To        *time.Time    // created_at, inclusive; nil: no upper bound
	Limit     int
	Offset    int
}

// sqlArgs builds a WHERE clause with numbered parameters.
type sqlArgs struct {
	conds []string
	args  []any
}

func (a *sqlArgs) add(cond string, v any) {
	a.args = append(a.args, v)
	a.conds = append(a.conds, strings.ReplaceAll(cond, "?", fmt.Sprintf("$%d", len(a.args))))
}

// param appends v and returns its placeholder.
func (a *sqlArgs) param(v any) string {
	a.args = append(a.args, v)
	return fmt.Sprintf("$%d", len(a.args))
}

func (a *sqlArgs) where() string {
	if len(a.conds) == 0 {
		return "true"
	}
	return strings.Join(a.conds, " AND ")
}

// ListMessages lists the messages matching f, newest first, and how the partitions matching
// the queue, partition, namespace and task filters are consumed.
func (s *Store) ListMessages(ctx context.Context, f MessageFilter) ([]MessageInfo, ConsumptionMode, error) {
	var scope sqlArgs
	scope.add(inScope("q.name", "?"), f.Scope.Tenant)
	if f.Queue != (QueueName{}) {
		scope.add("q.name = ?", f.Queue.Stored())
	}
	if f.Partition != "" {
		scope.add("p.name = ?", f.Partition)
	}
	if f.Namespace != "" {
		scope.add("q.namespace = ?", f.Namespace)
	}
	if f.Task != "" {
		scope.add("q.task = ?", f.Task)
	}
	list := sqlArgs{conds: append([]string{}, scope.conds...), args: append([]any{}, scope.args...)}
	if f.From != nil {
		list.add("m.created_at >= ?", *f.From)
	} else {
		list.conds = append(list.conds, "m.created_at >= now() - interval '1 hour'")
	}
	if f.To != nil {
		list.add("m.created_at <= ?", *f.To)
	}
	if f.Status != "" {
		list.add("st.status = ?", f.Status)
	}
	limit, offset := list.param(f.Limit), list.param(f.Offset)

	b := &pgx.Batch{}
	b.Queue(`SELECT COALESCE(bool_or(pc.consumer_group = '__QUEUE_MODE__'), false),
			count(DISTINCT pc.consumer_group) FILTER (WHERE pc.consumer_group <> '__QUEUE_MODE__')
		FROM queen.partition_consumers pc
		JOIN queen.partitions p ON p.id = pc.partition_id
		JOIN queen.queues q ON q.id = p.queue_id
		WHERE `+scope.where(), scope.args...)
	b.Queue(`SELECT `+messageColumns+` FROM queen.messages m`+messageState+`
		WHERE `+list.where()+`
		ORDER BY m.created_at DESC, m.id DESC
		LIMIT `+limit+` OFFSET `+offset, list.args...)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	var mode ConsumptionMode
	if err := br.QueryRow().Scan(&mode.HasQueueMode, &mode.BusGroups); err != nil {
		return nil, mode, fmt.Errorf("cannot read the consumption mode: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, mode, fmt.Errorf("cannot list messages: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (MessageInfo, error) {
		var m MessageInfo
		err := row.Scan(m.scanTargets()...)
		return m, err
	})
	if err != nil {
		return nil, mode, fmt.Errorf("cannot list messages: %w", err)
	}
	return out, mode, nil
}

// GroupPosition is where one consumer group stands relative to a message.
type GroupPosition struct {
	Name           string
	Consumed       bool
	LeaseExpiresAt *time.Time // the group's lease covering the message, if any
}

// MessageDetail is one message with its payload, queue settings and consumer groups.
type MessageDetail struct {
	MessageInfo
	Payload      json.RawMessage
	Encrypted    bool
	ErrorMessage *string // from the newest dead-letter entry
	RetryCount   *int32
	HasQueueMode bool
	LeaseTime    int
	RetryLimit   int
	RetryDelay   int
	TTL          int
	Groups       []GroupPosition // __QUEUE_MODE__ first, then by name
}

// Message returns one message; nil when it does not exist.
func (s *Store) Message(ctx context.Context, partitionID uuid.UUID, transactionID string) (*MessageDetail, error) {
	b := &pgx.Batch{}
	b.Queue(`SELECT `+messageColumns+`, m.payload, m.is_encrypted, dl.error_message, dl.retry_count,
			qm.partition_id IS NOT NULL, q.lease_time, q.retry_limit, q.retry_delay, q.ttl `+messageByTransaction+messageState+`
		WHERE t.partition_id = $1 AND t.transaction_id = $2`, partitionID, transactionID)
	b.Queue(`SELECT pc.consumer_group, pc.cursor_seq >= m.seq,
			CASE WHEN pc.lease_expires_at > now() AND m.seq > pc.cursor_seq AND m.seq <= pc.lease_end_seq
			     THEN pc.lease_expires_at END
		`+messageByTransaction+`
		JOIN queen.partition_consumers pc ON pc.partition_id = m.partition_id
		WHERE t.partition_id = $1 AND t.transaction_id = $2
		ORDER BY pc.consumer_group <> '__QUEUE_MODE__', pc.consumer_group COLLATE "C"`, partitionID, transactionID)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	var m MessageDetail
	err := br.QueryRow().Scan(append(m.scanTargets(), &m.Payload, &m.Encrypted, &m.ErrorMessage, &m.RetryCount,
		&m.HasQueueMode, &m.LeaseTime, &m.RetryLimit, &m.RetryDelay, &m.TTL)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read message %s/%s: %w", partitionID, transactionID, err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("cannot read the consumer groups of message %s/%s: %w", partitionID, transactionID, err)
	}
	m.Groups, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (GroupPosition, error) {
		var g GroupPosition
		err := row.Scan(&g.Name, &g.Consumed, &g.LeaseExpiresAt)
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("cannot read the consumer groups of message %s/%s: %w", partitionID, transactionID, err)
	}
	return &m, nil
}

// DeleteMessage deletes one message with its dead-letter entries and traces, and frees its
// transactionId. Its place in the segment stays, with NULL fields; a segment left with no
// message goes. Cursors are not adjusted. It reports whether the message existed.
func (s *Store) DeleteMessage(ctx context.Context, partitionID uuid.UUID, transactionID string) (bool, error) {
	var found bool
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var segment pgtype.Int8
		err := tx.QueryRow(ctx, `
		WITH gone AS (
			DELETE FROM queen.message_transactions WHERE partition_id = $1 AND transaction_id = $2 RETURNING seq),
		blanked AS (
			UPDATE queen.segments s
			SET ids[x.i] = NULL, transaction_ids[x.i] = NULL, trace_ids[x.i] = NULL, payloads[x.i] = NULL,
			    encrypted[x.i] = NULL, producer_subs[x.i] = NULL
			FROM gone CROSS JOIN LATERAL (
				SELECT last_seq, (gone.seq - first_seq + 1)::int AS i FROM queen.segments
				WHERE partition_id = $1 AND last_seq >= gone.seq ORDER BY last_seq LIMIT 1) x
			WHERE s.partition_id = $1 AND s.last_seq = x.last_seq
			RETURNING s.last_seq),
		dead AS (
			DELETE FROM queen.dead_letter_queue d USING gone WHERE d.partition_id = $1 AND d.message_seq = gone.seq),
		traces AS (
			DELETE FROM queen.message_traces t USING gone WHERE t.partition_id = $1 AND t.message_seq = gone.seq)
		SELECT EXISTS (SELECT 1 FROM gone), (SELECT last_seq FROM blanked)`, partitionID, transactionID).Scan(&found, &segment)
		if err != nil || !segment.Valid {
			return err
		}
		// A statement cannot delete the row its own CTE updated: the emptied segment goes in
		// a second one.
		_, err = tx.Exec(ctx, `DELETE FROM queen.segments
			WHERE partition_id = $1 AND last_seq = $2 AND cardinality(array_remove(ids, NULL)) = 0`, partitionID, segment.Int64)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("cannot delete message %s/%s: %w", partitionID, transactionID, err)
	}
	if found {
		s.leased.forgetTransaction(partitionID, transactionID)
	}
	return found, nil
}

// DLQFilter selects dead-letter entries; empty strings, the zero QueueName and nil times match
// anything.
type DLQFilter struct {
	Scope     Scope // the caller's tenant
	Queue     QueueName
	Group     string
	Partition string
	From, To  *time.Time // failed_at, both inclusive
	Limit     int
	Offset    int
}

// DLQEntry is one dead-letter entry with its message.
type DLQEntry struct {
	MessageID     uuid.UUID
	TransactionID string
	PartitionID   uuid.UUID
	Queue         QueueName
	Partition     string
	Group         string
	Error         *string
	RetryCount    int
	Payload       json.RawMessage
	Encrypted     bool   // Payload is a sealed envelope (queen.messages.is_encrypted)
	ProducerSub   string // "" when none (see PushItem)
	CreatedAt     time.Time
	FailedAt      time.Time
}

// ListDLQ returns one page of the dead-letter entries matching f, newest failure first, and
// how many entries match in all.
func (s *Store) ListDLQ(ctx context.Context, f DLQFilter) ([]DLQEntry, int64, error) {
	var w sqlArgs
	w.add(inScope("q.name", "?"), f.Scope.Tenant)
	if f.Queue != (QueueName{}) {
		w.add("q.name = ?", f.Queue.Stored())
	}
	if f.Group != "" {
		w.add("d.consumer_group = ?", f.Group)
	}
	if f.Partition != "" {
		w.add("p.name = ?", f.Partition)
	}
	if f.From != nil {
		w.add("d.failed_at >= ?", *f.From)
	}
	if f.To != nil {
		w.add("d.failed_at <= ?", *f.To)
	}
	limit, offset := w.param(f.Limit), w.param(f.Offset)
	// One statement, so the total and the page agree; the outer LEFT JOIN yields one row (with
	// the total) even when the page is empty.
	rows, err := s.pool.Query(ctx, `
		WITH f AS (
			SELECT m.id, m.transaction_id, m.partition_id, q.name AS queue, p.name AS partition, d.consumer_group,
			       d.error_message, d.retry_count, m.payload, m.producer_sub, m.created_at, d.failed_at, d.id AS entry,
			       m.is_encrypted
			FROM queen.dead_letter_queue d
			CROSS JOIN LATERAL queen.message_at(d.partition_id, d.message_seq) m
			JOIN queen.partitions p ON p.id = d.partition_id
			JOIN queen.queues q ON q.id = p.queue_id
			WHERE `+w.where()+`),
		page AS (SELECT * FROM f ORDER BY failed_at DESC, entry LIMIT `+limit+` OFFSET `+offset+`)
		SELECT (SELECT count(*) FROM f), page.id, page.transaction_id, page.partition_id, page.queue, page.partition,
		       page.consumer_group, page.error_message, page.retry_count, page.payload, COALESCE(page.producer_sub, ''),
		       page.created_at, page.failed_at, page.is_encrypted
		FROM (SELECT 1) one LEFT JOIN page ON true
		ORDER BY page.failed_at DESC, page.entry`, w.args...)
	if err != nil {
		return nil, 0, fmt.Errorf("cannot list dead letters: %w", err)
	}
	defer rows.Close()
	var total int64
	out := []DLQEntry{}
	for rows.Next() {
		var e DLQEntry
		var id pgtype.UUID
		var txID, partition, group pgtype.Text
		var pid pgtype.UUID
		var retries pgtype.Int4
		var created, failed pgtype.Timestamptz
		var encrypted pgtype.Bool
		if err := rows.Scan(&total, &id, &txID, &pid, &e.Queue, &partition, &group, &e.Error, &retries, &e.Payload,
			&e.ProducerSub, &created, &failed, &encrypted); err != nil {
			return nil, 0, fmt.Errorf("cannot list dead letters: %w", err)
		}
		if !id.Valid {
			continue // the empty page
		}
		e.MessageID, e.PartitionID = id.Bytes, pid.Bytes
		e.TransactionID, e.Partition, e.Group = txID.String, partition.String, group.String
		e.RetryCount, e.CreatedAt, e.FailedAt = int(retries.Int32), created.Time, failed.Time
		e.Encrypted = encrypted.Bool
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("cannot list dead letters: %w", err)
	}
	return out, total, nil
}
