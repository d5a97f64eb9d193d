package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// PushItem is one message to store. The HTTP layer has validated every field, so nothing here
// can make PostgreSQL refuse the statement for one item and fail the others fused with it.
type PushItem struct {
	Queue         QueueName
	Partition     string
	TransactionID string
	TraceID       uuid.NullUUID
	Payload       json.RawMessage
	// ProducerSub is the sub claim of the pushing token, "" when there is none (an empty sub is
	// no sub); it is stored as NULL then.
	ProducerSub string
	Encrypted   bool
}

// PushStatus is what became of one pushed item.
type PushStatus string

// Push statuses.
const (
	StatusQueued    PushStatus = "queued"
	StatusDuplicate PushStatus = "duplicate" // the transactionId is stored already
	StatusFailed    PushStatus = "failed"    // not stored; PushResult.Error says why
)

// PushResult is the outcome of one PushItem. A duplicate carries the original message's id.
type PushResult struct {
	Status      PushStatus
	MessageID   uuid.UUID
	PartitionID uuid.UUID
	Error       string // why a StatusFailed item was not stored
}

// Push stores items in one transaction and returns one result per item, in order. BEGIN
// travels with its first batch and COMMIT with its second, so the partition locks taken in the
// first are held for one round trip and the commit, which bounds a hot partition's throughput.
//
// The first attempt does not look the transactionIds up: the key of message_transactions
// (partition_id, transaction_id) refuses one already stored as the messages go in, where the
// lookup cost an index probe per message. A refusal (a producer's retry, a replayed spool: rare)
// rolls the push back and runs it again with the lookup, which answers such items "duplicate".
// Nor does it create queues and partitions, which all but a partition's first push find: the
// upserts cost about 1 µs a message. A push naming a partition that does not exist rolls back
// and runs again with them.
func (s *Store) Push(ctx context.Context, items []PushItem) ([]PushResult, error) {
	o := pushOptions{explicit: true, existing: true}
	for {
		out, err := s.push(ctx, items, o)
		switch {
		case o.existing && errors.Is(err, errNewPartition):
			o.existing = false
		case !o.lookUp && errors.Is(err, errStoredTransaction):
			o.lookUp = true
		default:
			return out, err
		}
	}
}

func (s *Store) push(ctx context.Context, items []PushItem, o pushOptions) ([]PushResult, error) {
	var out []PushResult
	err := s.pipelinedTx(ctx, "push", func(conn *pgx.Conn) error {
		var err error
		out, err = pushInTx(ctx, conn, conn.TypeMap(), items, o, s.sealer)
		return err
	})
	return out, err
}

// pushOptions say how pushInTx runs.
type pushOptions struct {
	// explicit: tx is a bare connection; the first batch opens the transaction and the second
	// commits it.
	explicit bool
	// lookUp: the stored transactionIds are looked up first and their items answered
	// "duplicate"; without, a stored one fails the push with errStoredTransaction.
	lookUp bool
	// existing: the queues and partitions are not created; a push naming one that does not
	// exist fails with errNewPartition.
	existing bool
}

// errStoredTransaction is a push without the lookup refused by message_transactions' key: an
// item's transactionId is stored in its partition already.
var errStoredTransaction = errors.New("a transactionId of the push is stored already")

// errNewPartition is a push with pushOptions.existing naming a partition that does not exist.
var errNewPartition = errors.New("a partition of the push does not exist yet")

// PushLaneKey keys a push item by its queue and partition, for the push lanes (fusion.Lanes):
// a push holds its partitions' row locks until it commits, so pushes to one partition could
// only commit one after the other anyway; in one lane they are fused instead.
func PushLaneKey(it PushItem) uint32 {
	h := fnv.New32a()
	h.Write([]byte(it.Queue.Tenant))
	h.Write([]byte{0})
	h.Write([]byte(it.Queue.Name))
	h.Write([]byte{0})
	h.Write([]byte(it.Partition))
	return h.Sum32()
}

// batchSender is a pgx.Tx, or a connection whose transaction the batches open and close.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

type partitionKey struct {
	queue     QueueName
	partition string
}

type dedupKey struct {
	partition uuid.UUID
	txID      string
}

// duplicateProbeSQL finds which of the items' transactionIds ($3, in partition $2 of queue $1)
// a partition holds already: per item, one probe of the partitions' (queue_id, name) index, one
// of message_transactions' key and a read of the segment holding the message. The LIMITs keep each probe a
// subquery of its own. Flattened into the join, the planner, which knows only the average size
// of a partition, read the partition by its primary key and compared every message's
// transactionId (1.5 s for 1000 items into a partition of 90k messages, in a database of many
// small ones), and with many queues it hashed every partition for each push. A generic plan
// with a hash join had scanned all of messages before that.
const duplicateProbeSQL = `SELECT p.id, v.tx, m.id
	FROM unnest($1::text[], $2::text[], $3::text[]) AS v(q, p, tx)
	CROSS JOIN LATERAL (SELECT p.id FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id AND p.name = v.p
		WHERE q.name = v.q LIMIT 1) p
	CROSS JOIN LATERAL (SELECT m.id FROM queen.message_transactions t CROSS JOIN LATERAL queen.message_at(t.partition_id, t.seq) m
		WHERE t.partition_id = p.id AND t.transaction_id = v.tx LIMIT 1) m`

// lockPartitionsSQL locks the partitions ($2 of queues $1) in id order and reads their heads.
// Each is found by a LATERAL probe of the (queue_id, name) key, whose bounds are then constants
// of the probe: as a join, a generic plan made while the tables were nearly empty kept only
// queue_id as the index condition and compared the name of every partition of the queue, for
// every item (0.9 s for a push of 1,000 new partitions into a queue of 3,000). The lock is
// taken through the primary key.
const lockPartitionsSQL = `SELECT p.id, q.name, p.name, p.last_seq, q.encryption_enabled
	FROM unnest($1::text[], $2::text[]) AS v(q, p)
	CROSS JOIN LATERAL (SELECT q.id, q.name, q.encryption_enabled FROM queen.queues q WHERE q.name = v.q LIMIT 1) q
	CROSS JOIN LATERAL (SELECT k.id FROM queen.partitions k WHERE k.queue_id = q.id AND k.name = v.p LIMIT 1) k
	JOIN queen.partitions p ON p.id = k.id
	ORDER BY p.id FOR NO KEY UPDATE OF p`

// pushInTx creates missing queues and partitions, locks the target partitions in id order (the
// lock serialises pushes per partition so sequence order equals commit order, and id order keeps
// two concurrent batches from deadlocking), finds transactionIds already stored (o.lookUp),
// numbers the new messages after each partition's head and inserts them with one unnest
// statement. The lock is FOR NO KEY UPDATE, which the push's own update of last_seq takes
// anyway: FOR UPDATE would also block the foreign-key checks (FOR KEY SHARE) of the pops that
// write a consumer row of the partition, making each wait for the pushes in flight.
//
// Payloads of queues flagged encryption_enabled are sealed with sealer (see sealForQueue).
func pushInTx(ctx context.Context, tx batchSender, types *pgtype.Map, items []PushItem, o pushOptions, sealer PayloadSealer) ([]PushResult, error) {
	acceptEncodedArrays(types)
	targets, itemTarget, byKey := pushTargetsOf(items)
	pq := make([]string, len(targets))
	pp := make([]string, len(targets))
	for i, t := range targets {
		pq[i], pp[i] = t.queue, t.partition
	}

	b := &pgx.Batch{}
	if o.explicit {
		b.Queue("BEGIN")
	}
	b.Queue(keyedPlans)
	// Namespace and task derive from the queue name (ns.task...) as in the reference, without
	// the tenant of an internal name.
	if !o.existing {
		queueNames := slices.Compact(slices.Sorted(slices.Values(pq)))
		b.Queue(`INSERT INTO queen.queues (name, namespace, task)
			SELECT n, split_part(`+unscoped("n")+`, '.', 1), split_part(`+unscoped("n")+`, '.', 2) FROM unnest($1::text[]) AS n ORDER BY n
			ON CONFLICT (name) DO NOTHING`, queueNames)
		b.Queue(`INSERT INTO queen.partitions (queue_id, name)
			SELECT q.id, v.p FROM unnest($1::text[], $2::text[]) AS v(q, p) JOIN queen.queues q ON q.name = v.q
			ORDER BY q.id, v.p
			ON CONFLICT (queue_id, name) DO NOTHING`, pq, pp)
	}
	b.Queue(lockPartitionsSQL, pq, pp)
	if o.lookUp {
		txQ := make([]string, len(items))
		txP := make([]string, len(items))
		txIDs := make([]string, len(items))
		for i, it := range items {
			t := &targets[itemTarget[i]]
			txQ[i], txP[i], txIDs[i] = t.queue, t.partition, it.TransactionID
		}
		b.Queue(duplicateProbeSQL, txQ, txP, txIDs)
	}
	br := tx.SendBatch(ctx, b)
	if o.explicit {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return nil, fmt.Errorf("cannot begin a push: %w", err)
		}
	}
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, fmt.Errorf("cannot begin a push: %w", err)
	}
	if !o.existing {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return nil, fmt.Errorf("cannot create queues: %w", err)
		}
		if _, err := br.Exec(); err != nil {
			br.Close()
			return nil, fmt.Errorf("cannot create partitions: %w", err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, fmt.Errorf("cannot lock partitions: %w", err)
	}
	for rows.Next() {
		var id uuid.UUID
		var k partitionKey
		var last int64
		var encrypted bool
		if err := rows.Scan(&id, &k.queue, &k.partition, &last, &encrypted); err != nil {
			rows.Close()
			br.Close()
			return nil, fmt.Errorf("cannot lock partitions: %w", err)
		}
		if j, ok := byKey[k]; ok {
			targets[j].id, targets[j].head, targets[j].seal = id, last, encrypted
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		br.Close()
		return nil, fmt.Errorf("cannot lock partitions: %w", err)
	}
	// With the lookup, existing holds the transactionIds stored already and then every item
	// stored (a later item with the same transactionId is a duplicate), sized once instead of
	// grown. Without it, the key of message_transactions refuses a transactionId named twice in
	// the push as it refuses one stored before, and the push runs again with the lookup.
	var existing map[dedupKey]uuid.UUID
	if o.lookUp {
		existing = make(map[dedupKey]uuid.UUID, len(items))
		rows, err = br.Query()
		if err != nil {
			br.Close()
			return nil, fmt.Errorf("cannot look up transaction ids: %w", err)
		}
		for rows.Next() {
			var k dedupKey
			var id uuid.UUID
			if err := rows.Scan(&k.partition, &k.txID, &id); err != nil {
				rows.Close()
				br.Close()
				return nil, fmt.Errorf("cannot look up transaction ids: %w", err)
			}
			existing[k] = id
		}
		rows.Close()
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("cannot lock partitions: %w", err)
	}

	out := make([]PushResult, len(items))
	segs := segmentBuilder{}
	for i, it := range items {
		t := &targets[itemTarget[i]]
		pid := t.id
		if pid == uuid.Nil && o.existing {
			return nil, errNewPartition
		}
		if pid == uuid.Nil {
			// Deleted between its upsert and the lock (idle-partition cleanup, a queue
			// delete): run the whole push again, which recreates it.
			return nil, fmt.Errorf("partition %s/%s vanished during push: %w", it.Queue, it.Partition, errRetry)
		}
		k := dedupKey{pid, it.TransactionID}
		if id, dup := existing[k]; dup {
			out[i] = PushResult{Status: StatusDuplicate, MessageID: id, PartitionID: pid}
			continue
		}
		payload, encrypted := it.Payload, it.Encrypted
		if t.seal {
			sealed, refused, err := sealForQueue(sealer, &it)
			if err != nil {
				return nil, err
			}
			if refused != "" {
				out[i] = PushResult{Status: StatusFailed, PartitionID: pid, Error: refused}
				continue
			}
			payload, encrypted = sealed, true
		}
		id, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("cannot mint a message id: %w", err)
		}
		t.head++
		if existing != nil {
			existing[k] = id
		}
		out[i] = PushResult{Status: StatusQueued, MessageID: id, PartitionID: pid}
		if t.run < 0 {
			t.run = segs.startRun(pid, t.head, t.items)
		}
		segs.add(t.run, storedMessage{id: id, txID: it.TransactionID, trace: it.TraceID, payload: payload,
			encrypted: encrypted, sub: it.ProducerSub})
	}
	b = &pgx.Batch{}
	if segs.empty() {
		if o.explicit {
			b.Queue("COMMIT")
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return nil, fmt.Errorf("cannot commit a push: %w", err)
			}
		}
		return out, nil
	}
	headIDs := make([][16]byte, 0, len(segs.runs))
	headSeqs := make([]int64, 0, len(segs.runs))
	for _, t := range targets {
		if t.run >= 0 {
			headIDs = append(headIDs, t.id)
			headSeqs = append(headSeqs, t.head)
		}
	}
	segs.queue(b)
	b.Queue(`UPDATE queen.partitions p SET last_seq = v.seq, last_message_at = now()
		FROM unnest($1::uuid[], $2::int8[]) AS v(id, seq) WHERE p.id = v.id AND p.last_seq < v.seq`, headIDs, headSeqs)
	if o.explicit {
		b.Queue("COMMIT")
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		var pgErr *pgconn.PgError
		if !o.lookUp && errors.As(err, &pgErr) && pgErr.ConstraintName == "message_transactions_pkey" {
			return nil, errStoredTransaction
		}
		return nil, fmt.Errorf("cannot insert messages: %w", err)
	}
	return out, nil
}

// pushTarget is one partition a push names.
type pushTarget struct {
	queue     string // the queue's stored name
	partition string
	items     int       // the push's items naming it
	id        uuid.UUID // uuid.Nil until the lock finds it
	head      int64     // its last_seq, then the last one the push numbered
	seal      bool      // its queue stores sealed payloads
	run       int       // its run of the push's segments, -1 until a message is stored in it
}

// pushTargetsOf lists the partitions items name, in the order they first appear, with the
// index of each item's partition and the index of each partition by key. Consecutive items
// mostly name the same partition (a request's items, fused with another request's), so an item
// is compared with the one before it instead of looked up.
func pushTargetsOf(items []PushItem) (targets []pushTarget, itemTarget []int32, byKey map[partitionKey]int) {
	itemTarget = make([]int32, len(items))
	byKey = map[partitionKey]int{}
	stored := map[QueueName]string{} // each queue's stored name, made once per push, not per item
	for i, it := range items {
		if i > 0 && it.Partition == items[i-1].Partition && it.Queue == items[i-1].Queue {
			itemTarget[i] = itemTarget[i-1]
			targets[itemTarget[i]].items++
			continue
		}
		k := partitionKey{it.Queue, it.Partition}
		j, ok := byKey[k]
		if !ok {
			q, ok := stored[it.Queue]
			if !ok {
				q = it.Queue.Stored()
				stored[it.Queue] = q
			}
			j = len(targets)
			byKey[k] = j
			targets = append(targets, pushTarget{queue: q, partition: it.Partition, run: -1})
		}
		itemTarget[i] = int32(j)
		targets[j].items++
	}
	return targets, itemTarget, byKey
}
