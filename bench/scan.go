package main

import (
	"bytes"
	"encoding/json"
	"strconv"

	"queen/jsonscan"
)

// The bench's consumers decoded every pop answer with encoding/json, which was 72 % of the
// bench's own CPU in pop+ack: a third of this machine's two cores, taken from the broker and
// PostgreSQL it measures. scanPop and scanAcks read an answer's common shape in one pass that
// also checks its syntax (jsonscan) and give up on anything else, which then goes to
// encoding/json as before: they return what json.Unmarshal would, or false
// (FuzzScanMatchesJSON).

var (
	popAnswerFields = []string{"success", "error", "messages"}
	popMsgFields    = []string{"transactionId", "partitionId", "partition", "leaseId", "data"}
	payloadFields   = []string{"p", "s", "k", "r"}
	ackResultFields = []string{"success", "error"}
)

// scanPop reads a pop answer as decodePop does; false when it cannot, or when decodePop would
// fail (the error is decodePop's to word).
func scanPop(b []byte) ([]popMsg, bool) {
	const messages = 2 // popAnswerFields[messages] is read as it is walked; the others are kept in top
	top := make([]json.RawMessage, messages)
	var msgs []popMsg
	listed := false // messages is an array, not absent or null
	fields := make([]json.RawMessage, len(popMsgFields))
	data := make([]json.RawMessage, len(payloadFields))
	end, ok := jsonscan.Object(b, 0, 0, popAnswerFields, func(k, at int) (int, bool) {
		if k != messages {
			end, ok := jsonscan.Value(b, at, 1)
			top[k] = b[at:end]
			return end, ok
		}
		if at < len(b) && b[at] == 'n' { // null, or not JSON: Value tells
			return jsonscan.Value(b, at, 1)
		}
		listed = true
		return jsonscan.Array(b, at, 1, func(_, at int) (int, bool) {
			clear(fields)
			end, ok := jsonscan.Fields(b, at, 2, popMsgFields, fields)
			if !ok {
				return end, false
			}
			var m popMsg
			var ok1, ok2, ok3, ok4 bool
			m.TransactionID, ok1 = scanString(fields[0])
			m.PartitionID, ok2 = scanString(fields[1])
			m.Partition, ok3 = scanString(fields[2])
			m.LeaseID, ok4 = scanString(fields[3])
			if !ok1 || !ok2 || !ok3 || !ok4 {
				return end, false
			}
			if d := fields[4]; d != nil && string(d) != "null" {
				clear(data)
				if _, ok := jsonscan.Fields(d, 0, 3, payloadFields, data); !ok {
					return end, false
				}
				p, okP := scanInt(data[0])
				s, okS := scanInt(data[1])
				k, okK := scanInt(data[2])
				r, okR := scanString(data[3])
				if !okP || !okS || !okK || !okR {
					return end, false
				}
				m.Data = payload{P: int(p), S: s, K: int(k), R: r}
			}
			msgs = append(msgs, m)
			return end, true
		})
	})
	if !ok || !jsonscan.End(b, end) {
		return nil, false
	}
	success, ok := scanBool(top[0])
	errText, ok2 := scanString(top[1])
	if !ok || !ok2 || !success && errText != "no_available_partition" {
		return nil, false
	}
	if listed && msgs == nil {
		msgs = []popMsg{}
	}
	return msgs, true
}

// scanAcks reads an ack batch's answer, an array of results; false when it cannot.
func scanAcks(b []byte) ([]ackResult, bool) {
	var res []ackResult
	fields := make([]json.RawMessage, len(ackResultFields))
	end, ok := jsonscan.Array(b, 0, 0, func(_, at int) (int, bool) {
		clear(fields)
		end, ok := jsonscan.Fields(b, at, 1, ackResultFields, fields)
		if !ok {
			return end, false
		}
		var r ackResult
		if r.Success, ok = scanBool(fields[0]); !ok {
			return end, false
		}
		if e := fields[1]; e != nil && string(e) != "null" {
			s, ok := scanString(e)
			if !ok {
				return end, false
			}
			r.Error = &s
		}
		res = append(res, r)
		return end, true
	})
	if !ok || !jsonscan.End(b, end) || res == nil {
		return nil, false
	}
	return res, true
}

// scanString reads a JSON string (absent or null: ""); false for another type. A string with
// an escape or a byte outside ASCII is left to encoding/json, which also replaces invalid UTF-8.
func scanString(raw json.RawMessage) (string, bool) {
	switch {
	case raw == nil || string(raw) == "null":
		return "", true
	case raw[0] != '"':
		return "", false
	}
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && plainBytes(inner) {
		return string(inner), true
	}
	var s string
	return s, json.Unmarshal(raw, &s) == nil
}

func plainBytes(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// scanBool reads true or false (absent or null: false); false for another type.
func scanBool(raw json.RawMessage) (v, ok bool) {
	switch string(raw) {
	case "true":
		return true, true
	case "false", "null", "":
		return false, true
	}
	return false, false
}

// scanInt reads an integer (absent or null: 0) as encoding/json reads one into an int64.
func scanInt(raw json.RawMessage) (int64, bool) {
	if raw == nil || string(raw) == "null" {
		return 0, true
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	return n, err == nil
}
