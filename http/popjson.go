package http

import (
	"bytes"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"queen/jsonscan"
	"queen/persistence"
)

// appendPopBody encodes a successful pop answer, the broker's largest and most frequent
// response, by appending to buf: encoding/json spent a tenth of the consume path's CPU
// reflecting over the same ten fields per message and re-validating every payload. The keys and
// their order match popJSON and popMessageJSON.
func appendPopBody(buf []byte, req persistence.PopRequest, res persistence.PopResult, leaseID string) []byte {
	buf = append(buf, `{"consumerGroup":`...)
	buf = appendJSONString(buf, req.Group)
	buf = append(buf, `,"leaseId":`...)
	buf = appendJSONString(buf, leaseID)
	buf = append(buf, `,"messages":[`...)
	// What the messages of one pop repeat is escaped and formatted once: the group and lease
	// for the whole pop, the partition while it is the same, the time for a segment's messages,
	// which share it (formatting it per message was 2 % of the broker's CPU in bench cost).
	head := append(appendJSONString([]byte(`{"consumerGroup":`), req.Group), `,"createdAt":"`...)
	lease := append(appendJSONString([]byte(`,"leaseId":`), leaseID), `,"partition":`...)
	var (
		atBuf, partBuf [80]byte
		at, part       []byte
		lastAt         time.Time
		lastPart       uuid.UUID
	)
	for i := range res.Messages {
		m := &res.Messages[i]
		if i > 0 {
			buf = append(buf, ',')
		}
		if at == nil || !m.CreatedAt.Equal(lastAt) {
			at, lastAt = m.CreatedAt.UTC().AppendFormat(atBuf[:0], timeFormat), m.CreatedAt
		}
		if part == nil || m.Partition.ID != lastPart {
			part = appendJSONString(partBuf[:0], m.Partition.Name)
			part = appendUUID(append(part, `,"partitionId":`...), m.Partition.ID)
			lastPart = m.Partition.ID
		}
		buf = append(append(buf, head...), at...)
		buf = append(buf, `","data":`...)
		if len(m.Payload) == 0 {
			buf = append(buf, "null"...)
		} else {
			buf = appendCompactJSONB(buf, m.Payload)
		}
		buf = append(buf, `,"id":`...)
		buf = appendUUID(buf, m.ID)
		buf = append(append(buf, lease...), part...)
		buf = append(buf, `,"producerSub":`...)
		if m.ProducerSub == "" {
			buf = append(buf, "null"...)
		} else {
			buf = appendJSONString(buf, m.ProducerSub)
		}
		buf = append(buf, `,"traceId":`...)
		if m.TraceID.Valid {
			buf = appendUUID(buf, m.TraceID.UUID)
		} else {
			buf = append(buf, "null"...)
		}
		buf = append(buf, `,"transactionId":`...)
		buf = appendJSONString(buf, m.TransactionID)
		buf = append(buf, '}')
	}
	buf = append(buf, ']')
	if len(res.Partitions) > 0 {
		first := res.Partitions[0]
		buf = append(buf, `,"partition":`...)
		buf = appendJSONString(buf, first.Name)
		buf = append(buf, `,"partitionId":`...)
		buf = appendUUID(buf, first.ID)
		buf = append(buf, `,"partitionsClaimed":`...)
		buf = strconv.AppendInt(buf, int64(len(res.Partitions)), 10)
	} else {
		buf = append(buf, `,"partition":"","partitionId":null`...)
	}
	buf = append(buf, `,"queue":`...)
	buf = appendJSONString(buf, req.Queue.Name)
	buf = append(buf, `,"success":true}`...)
	return buf
}

// appendCompactJSONB appends a stored payload without a space after a ':' or ',' outside its
// strings: the only whitespace in jsonb's output, which the messages stored before segments
// keep, and insignificant in a payload kept as its producer wrote it. One pass that tracks
// strings is enough; no validation is needed. A payload with neither ": " nor ", " anywhere,
// as JSON.stringify and every encoder without indentation writes it, has nothing to remove and
// is copied as it is, without the walk.
func appendCompactJSONB(buf, p []byte) []byte {
	if !bytes.Contains(p, []byte(": ")) && !bytes.Contains(p, []byte(", ")) {
		return append(buf, p...)
	}
	inString, escaped := false, false
	start := 0
	for i, c := range p {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' && i > 0 && (p[i-1] == ':' || p[i-1] == ','):
			buf = append(buf, p[start:i]...)
			start = i + 1
		}
	}
	return append(buf, p[start:]...)
}

func appendUUID(buf []byte, id uuid.UUID) []byte {
	var s [36]byte
	hexEncodeUUID(s[:], id)
	buf = append(buf, '"')
	buf = append(buf, s[:]...)
	return append(buf, '"')
}

// hexEncodeUUID writes id in its canonical 8-4-4-4-12 form, without allocating.
func hexEncodeUUID(dst []byte, id uuid.UUID) {
	const hex = "0123456789abcdef"
	j := 0
	for i, b := range id {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst[j] = '-'
			j++
		}
		dst[j], dst[j+1] = hex[b>>4], hex[b&0x0f]
		j += 2
	}
}

// appendJSONString appends s as a JSON string: quotes, backslashes and control characters are
// escaped, invalid UTF-8 becomes U+FFFD, everything else is copied.
func appendJSONString(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); {
		// The plain run first, eight bytes at a time: copied as it is.
		if i = jsonscan.PlainRun(s, i); i >= len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			buf = append(buf, s[start:i]...)
			switch c {
			case '"', '\\':
				buf = append(buf, '\\', c)
			case '\n':
				buf = append(buf, '\\', 'n')
			case '\r':
				buf = append(buf, '\\', 'r')
			case '\t':
				buf = append(buf, '\\', 't')
			default:
				buf = append(buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			buf = append(buf, s[start:i]...)
			buf = append(buf, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}
