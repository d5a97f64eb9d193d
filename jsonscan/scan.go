// Package jsonscan reads fields, elements and values out of a JSON document in place, without
// decoding it, checking the document's syntax as it goes (exactly what json.Valid accepts): the
// broker's readers of push and ack-batch bodies (http/fastdecode.go) and the bench's reader of
// pop answers take their common shapes this way, in one pass over the bytes, and leave
// everything else to encoding/json.
//
// depth is the number of arrays and objects around a value (0 for a document's top value):
// past maxJSONNesting, as encoding/json, a document is refused.
package jsonscan

import (
	"bytes"
	"encoding/json"
)

// Object reads the object at b[i] and calls field with the index in names of each field named
// there and the index of its value, which field reads (with Value, Object or Array at depth+1)
// and returns the index after. Every other field is checked and skipped. It returns the index
// after the object, and false when the object is not valid JSON or is not one it can read
// exactly as encoding/json would (a key with an escape or outside printable ASCII, a named
// field given twice, a key that matches a name only by encoding/json's case folding), or when
// field refused. names holds at most 64 names.
func Object(b []byte, i, depth int, names []string, field func(k, at int) (int, bool)) (int, bool) {
	i = SkipSpace(b, i)
	if i >= len(b) || b[i] != '{' || depth >= maxJSONNesting {
		return i, false
	}
	var seen uint64
	return members(b, i, '}', func(i int) (int, bool) {
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
		at := SkipSpace(b, i+1)
		for k, name := range names {
			if string(key) == name {
				if seen&(1<<k) != 0 {
					return at, false // a field given twice
				}
				seen |= 1 << k
				return field(k, at)
			}
		}
		for _, name := range names {
			// A key encoding/json would match by its own rule. Both are ASCII, so only a
			// key of the name's length can fold to it.
			if len(key) == len(name) && bytes.EqualFold(key, []byte(name)) {
				return at, false
			}
		}
		return Value(b, at, depth+1) // a field the reader does not read
	})
}

// Fields reads the object at b[i] as Object does and stores the value of each field named in
// names at the same index of out, as encoding/json would fill json.RawMessage fields.
func Fields(b []byte, i, depth int, names []string, out []json.RawMessage) (int, bool) {
	return Object(b, i, depth, names, func(k, at int) (int, bool) {
		end, ok := Value(b, at, depth+1)
		out[k] = b[at:end]
		return end, ok
	})
}

// Array calls each with the position n and the index of every element of the array at b[i],
// which each reads (at depth+1) and returns the index after; it returns the index after the
// array, and false when b[i] is not a valid array or each refused an element.
func Array(b []byte, i, depth int, each func(n, at int) (int, bool)) (int, bool) {
	i = SkipSpace(b, i)
	if i >= len(b) || b[i] != '[' || depth >= maxJSONNesting {
		return i, false
	}
	n := 0
	return members(b, i, ']', func(at int) (int, bool) {
		n++
		return each(n-1, at)
	})
}

// Value checks the value at b[i] and returns the index after it; false when it is not valid.
func Value(b []byte, i, depth int) (int, bool) {
	v := jsonValidator{b: b, i: i}
	ok := v.value(depth)
	return v.i, ok
}

// End reports whether only spaces follow b[i:]: a document read up to i is one JSON value.
func End(b []byte, i int) bool { return SkipSpace(b, i) == len(b) }

// members calls each with the index of every member or element of the object or array whose
// opening byte is b[i], up to close, and returns the index after it; false when the
// punctuation between them is not JSON's or each refused.
func members(b []byte, i int, close byte, each func(at int) (int, bool)) (int, bool) {
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
