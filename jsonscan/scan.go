// Package jsonscan reads fields, elements and values out of a JSON document in place, without
// decoding it: the broker's readers of push and ack-batch bodies (http/fastdecode.go) and the
// bench's reader of pop answers take their common shapes this way and leave everything else to
// encoding/json. Every function here expects valid JSON: check the document first.
package jsonscan

import (
	"bytes"
	"encoding/json"
)

// Fields reads the object at b[i] (b is valid JSON) and stores the value of each field
// named in names at the same index of out, as encoding/json would fill json.RawMessage fields.
// It returns the index after the object, and false when the object is not one it can read
// exactly as encoding/json would.
func Fields(b []byte, i int, names []string, out []json.RawMessage) (int, bool) {
	return elements(b, i, '{', '}', func(i int) (int, bool) {
		if b[i] != '"' {
			return i, false
		}
		end := bytes.IndexByte(b[i+1:], '"')
		if end < 0 {
			return i, false
		}
		key := b[i+1 : i+1+end]
		if !plainASCII(key) {
			return i, false
		}
		i = SkipSpace(b, i+end+2)
		if i >= len(b) || b[i] != ':' {
			return i, false
		}
		start := SkipSpace(b, i+1)
		i = SkipValue(b, start)
		for k, name := range names {
			switch {
			case string(key) == name && out[k] == nil:
				out[k] = b[start:i]
				return i, true
			case bytes.EqualFold(key, []byte(name)):
				// A field given twice, or a key encoding/json would match by its own rule.
				return i, false
			}
		}
		return i, true // a field the route does not read
	})
}

// Array calls each with the position n and the index of every element of the array at
// b[i] (valid JSON) and returns the index after it; false when b[i] is not an array or each
// refused an element.
func Array(b []byte, i int, each func(n, at int) (int, bool)) (int, bool) {
	n := 0
	return elements(b, i, '[', ']', func(at int) (int, bool) {
		n++
		return each(n-1, at)
	})
}

// elements calls each with the index of every member or element of the object or array
// (open, close) at b[i], b being valid JSON, and returns the index after it; false when b[i]
// is not one or each refused.
func elements(b []byte, i int, open, close byte, each func(at int) (int, bool)) (int, bool) {
	i = SkipSpace(b, i)
	if i >= len(b) || b[i] != open {
		return i, false
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == close {
		return i + 1, true
	}
	for i < len(b) {
		var ok bool
		if i, ok = each(i); !ok {
			return i, false
		}
		i = SkipSpace(b, i)
		switch {
		case i < len(b) && b[i] == ',':
			i = SkipSpace(b, i+1)
		case i < len(b) && b[i] == close:
			return i + 1, true
		default:
			return i, false
		}
	}
	return i, false
}

// plainASCII reports whether a key is printable ASCII without escapes: encoding/json matches
// such a key to a field name by the same bytes or by ASCII case folding only.
func plainASCII(key []byte) bool {
	for _, c := range key {
		if c < 0x20 || c >= 0x7f || c == '\\' {
			return false
		}
	}
	return true
}

func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// SkipValue returns the index after the value that starts at b[i], b being valid JSON.
func SkipValue(b []byte, i int) int {
	depth := 0
	for i < len(b) {
		switch b[i] {
		case '"':
			i = skipString(b, i)
		case '{', '[':
			depth++
			i++
		case '}', ']':
			depth--
			i++
		default: // a number, true, false or null
			for i < len(b) && !endsScalar(b[i]) {
				i++
			}
		}
		if depth == 0 {
			return i
		}
		i = SkipSpace(b, i)
		if i < len(b) && (b[i] == ',' || b[i] == ':') {
			i++
		}
	}
	return i
}

func endsScalar(c byte) bool {
	return c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\r' || c == '\n'
}

// skipString returns the index after the string that starts at b[i]: the first quote
// after an even run of backslashes.
func skipString(b []byte, i int) int {
	start := i + 1
	for i = start; ; {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b)
		}
		q, escapes := i+j, 0
		for k := q - 1; k >= start && b[k] == '\\'; k-- {
			escapes++
		}
		i = q + 1
		if escapes%2 == 0 {
			return i
		}
	}
}
