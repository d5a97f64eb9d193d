package persistence

import (
	"encoding/json"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// segmentSize is the most messages one segment holds. A push of more to one partition writes
// several; a pop of fewer than a segment reads (and decompresses) the whole one.
const segmentSize = 100

// storedMessage is one message as a push stores it.
type storedMessage struct {
	id        uuid.UUID
	txID      string
	trace     uuid.NullUUID
	payload   json.RawMessage
	encrypted bool
	sub       string
}

// segmentBuilder collects the messages of one push into segments (see migration 0006): per
// partition, in sequence order, a new segment every segmentSize messages.
type segmentBuilder struct {
	runs []partitionRun // one per partition, in the order the push first stores in it
	n    int
	// txBytes and payloadBytes add up the messages' transactionIds and payloads, to size the
	// arrays queue encodes.
	txBytes, payloadBytes int
}

// partitionRun is the messages a push stores in one partition, from sequence number first.
type partitionRun struct {
	partition uuid.UUID
	first     int64
	msgs      []storedMessage
}

func (b *segmentBuilder) empty() bool { return b.n == 0 }

// startRun opens the run of partition, whose messages are numbered from first, and returns its
// index for add. expect is how many messages the run may hold, to size it once.
func (b *segmentBuilder) startRun(partition uuid.UUID, first int64, expect int) int {
	b.runs = append(b.runs, partitionRun{partition: partition, first: first, msgs: make([]storedMessage, 0, expect)})
	return len(b.runs) - 1
}

// add appends m to run, whose messages come in sequence order.
func (b *segmentBuilder) add(run int, m storedMessage) {
	b.runs[run].msgs = append(b.runs[run].msgs, m)
	b.n++
	b.txBytes += len(m.txID)
	b.payloadBytes += len(m.payload)
}

// queue adds to batch the insert of the push: the segments, each a slice [from:to] of flat
// per-message arrays (slicing is a copy in PostgreSQL, where aggregating would sort), and from
// the rows inserted the transactionIds, whose key refuses one the partition holds already. The
// second insert reads the segments' own arrays: the broker sends each transactionId once.
func (b *segmentBuilder) queue(batch *pgx.Batch) {
	var (
		segPart  [][16]byte // [16]byte, not uuid.UUID: pgx encodes it natively instead of
		segFirst []int64    // through uuid.UUID's driver.Valuer and a string per element
		segLast  []int64
		segFrom  []int32
		segTo    []int32
		traces   = make([]pgtype.UUID, 0, b.n) // pgtype: encoded natively, not through a string
		enc      = make([]bool, 0, b.n)
		subs     = make([]pgtype.Text, 0, b.n)

		anyTrace, anyEnc, anySub bool
	)
	n := 0
	for ri := range b.runs {
		r := &b.runs[ri]
		for start := 0; start < len(r.msgs); start += segmentSize {
			end := min(start+segmentSize, len(r.msgs))
			segPart = append(segPart, r.partition)
			segFirst = append(segFirst, r.first+int64(start))
			segLast = append(segLast, r.first+int64(end-1))
			segFrom = append(segFrom, int32(n+1))
			segTo = append(segTo, int32(n+end-start))
			for _, m := range r.msgs[start:end] {
				traces = append(traces, pgtype.UUID{Bytes: m.trace.UUID, Valid: m.trace.Valid})
				enc = append(enc, m.encrypted)
				subs = append(subs, pgtype.Text{String: m.sub, Valid: m.sub != ""})
				anyTrace, anyEnc, anySub = anyTrace || m.trace.Valid, anyEnc || m.encrypted, anySub || m.sub != ""
				n++
			}
		}
	}
	// Most pushes carry no traceId, no producer sub and nothing sealed: those columns then go
	// as NULL and PostgreSQL fills each segment's array, instead of the broker encoding and
	// PostgreSQL decoding a value per message.
	if !anyTrace {
		traces = nil
	}
	if !anyEnc {
		enc = nil
	}
	if !anySub {
		subs = nil
	}
	batch.Queue(`WITH s AS (INSERT INTO queen.segments (partition_id, last_seq, first_seq, ids, transaction_ids, trace_ids, payloads, encrypted, producer_subs)
			SELECT v.p, v.last, v.first, ($6::uuid[])[v.a:v.b], ($7::text[])[v.a:v.b],
			       COALESCE(($8::uuid[])[v.a:v.b], array_fill(NULL::uuid, ARRAY[v.b - v.a + 1])),
			       ($9::text[])[v.a:v.b],
			       COALESCE(($10::bool[])[v.a:v.b], array_fill(false, ARRAY[v.b - v.a + 1])),
			       COALESCE(($11::text[])[v.a:v.b], array_fill(NULL::text, ARRAY[v.b - v.a + 1]))
			FROM unnest($1::uuid[], $2::int8[], $3::int8[], $4::int4[], $5::int4[]) AS v(p, first, last, a, b)
			RETURNING partition_id, first_seq, transaction_ids)
		INSERT INTO queen.message_transactions (partition_id, transaction_id, seq)
		SELECT s.partition_id, t.tx, s.first_seq + t.i - 1 FROM s, unnest(s.transaction_ids) WITH ORDINALITY AS t(tx, i)`,
		segPart, segFirst, segLast, segFrom, segTo, segmentColumn{b, columnIDs}, segmentColumn{b, columnTransactionIDs}, traces,
		segmentColumn{b, columnPayloads}, enc, subs)
}

// segmentColumn is one of the per-message arrays of a push's segments, written by pgx when it
// sends the statement (see arrayWriter): every message of the push, in the order of the
// segments (a partition's run after another, each in sequence order).
type segmentColumn struct {
	b   *segmentBuilder
	col int
}

const (
	columnIDs = iota
	columnTransactionIDs
	columnPayloads
)

func (c segmentColumn) appendArray(buf []byte) []byte {
	elem, size := uint32(pgtype.TextOID), arrayHeaderSize+c.b.n*arrayElementSize
	switch c.col {
	case columnIDs:
		elem, size = pgtype.UUIDOID, size+c.b.n*16
	case columnTransactionIDs:
		size += c.b.txBytes
	case columnPayloads:
		size += c.b.payloadBytes
	}
	buf = appendArrayHeader(slices.Grow(buf, size), elem, c.b.n)
	for r := range c.b.runs {
		msgs := c.b.runs[r].msgs
		for i := range msgs {
			m := &msgs[i]
			switch c.col {
			case columnIDs:
				buf = appendArrayElement(buf, m.id[:])
			case columnTransactionIDs:
				buf = appendArrayElement(buf, m.txID)
			case columnPayloads:
				buf = appendArrayElement(buf, m.payload)
			}
		}
	}
	return buf
}
