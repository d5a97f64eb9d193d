package jsonscan

import (
	"bytes"
	"encoding/binary"
)

// maxJSONNesting is the depth encoding/json's scanner refuses past.
const maxJSONNesting = 10000

// jsonValidator checks JSON syntax, accepting exactly what json.Valid accepts (a fuzz target
// compares the two). It exists for speed: json.Valid calls a state function for every byte,
// where this is a plain loop over strings, most of a push body.
type jsonValidator struct {
	b []byte
	i int
}

func (v *jsonValidator) space() {
	for v.i < len(v.b) && (v.b[v.i] == ' ' || v.b[v.i] == '\t' || v.b[v.i] == '\n' || v.b[v.i] == '\r') {
		v.i++
	}
}

func (v *jsonValidator) value(depth int) bool {
	if v.i >= len(v.b) {
		return false
	}
	switch c := v.b[v.i]; {
	case c == '{' || c == '[':
		if depth >= maxJSONNesting {
			return false
		}
		return v.container(c, depth+1)
	case c == '"':
		return v.str()
	case c == '-' || (c >= '0' && c <= '9'):
		return v.number()
	case c == 't':
		return v.literal("true")
	case c == 'f':
		return v.literal("false")
	case c == 'n':
		return v.literal("null")
	}
	return false
}

// container checks the object ('{') or array ('[') at v.i.
func (v *jsonValidator) container(open byte, depth int) bool {
	closer := byte(']')
	if open == '{' {
		closer = '}'
	}
	v.i++
	v.space()
	if v.i < len(v.b) && v.b[v.i] == closer {
		v.i++
		return true
	}
	for {
		if open == '{' {
			if v.i >= len(v.b) || v.b[v.i] != '"' || !v.str() {
				return false
			}
			v.space()
			if v.i >= len(v.b) || v.b[v.i] != ':' {
				return false
			}
			v.i++
			v.space()
		}
		if !v.value(depth) {
			return false
		}
		v.space()
		if v.i >= len(v.b) {
			return false
		}
		switch v.b[v.i] {
		case ',':
			v.i++
			v.space()
		case closer:
			v.i++
			return true
		default:
			return false
		}
	}
}

// str checks the string at v.i: no control character, escapes JSON knows.
func (v *jsonValidator) str() bool {
	for v.i++; ; v.i++ {
		// Eight plain bytes at a time: a payload is mostly long strings.
		for v.i+8 <= len(v.b) && !strSpecial(binary.LittleEndian.Uint64(v.b[v.i:])) {
			v.i += 8
		}
		if v.i >= len(v.b) {
			return false
		}
		switch c := v.b[v.i]; {
		case c == '"':
			v.i++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			// One of \" \\ \/ \b \f \n \r \t, or \u and four hex digits.
			if v.i+1 >= len(v.b) {
				return false
			}
			switch v.b[v.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				v.i++
			case 'u':
				if v.i+6 > len(v.b) {
					return false
				}
				for _, h := range v.b[v.i+2 : v.i+6] {
					if !isHex(h) {
						return false
					}
				}
				v.i += 5
			default:
				return false
			}
		}
	}
}

// strSpecial reports whether one of the eight bytes of w ends or escapes a string or is a
// control character: a '"', a '\\' or a byte below 0x20 (the bit tricks of "has a zero byte"
// and "has a byte less than n", exact for whether there is one).
func strSpecial(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quote, backslash := w^(ones*'"'), w^(ones*'\\')
	return ((quote-ones)&^quote|(backslash-ones)&^backslash|(w-ones*0x20)&^w)&highs != 0
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// number checks -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at v.i.
func (v *jsonValidator) number() bool {
	if v.b[v.i] == '-' {
		v.i++
	}
	switch {
	case v.i < len(v.b) && v.b[v.i] == '0':
		v.i++
	case v.i < len(v.b) && v.b[v.i] >= '1' && v.b[v.i] <= '9':
		v.digits()
	default:
		return false
	}
	if v.i < len(v.b) && v.b[v.i] == '.' {
		v.i++
		if !v.digits() {
			return false
		}
	}
	if v.i < len(v.b) && (v.b[v.i] == 'e' || v.b[v.i] == 'E') {
		v.i++
		if v.i < len(v.b) && (v.b[v.i] == '+' || v.b[v.i] == '-') {
			v.i++
		}
		if !v.digits() {
			return false
		}
	}
	return true
}

// digits steps over [0-9]+ and reports whether there was one.
func (v *jsonValidator) digits() bool {
	start := v.i
	for v.i < len(v.b) && v.b[v.i] >= '0' && v.b[v.i] <= '9' {
		v.i++
	}
	return v.i > start
}

func (v *jsonValidator) literal(word string) bool {
	if !bytes.HasPrefix(v.b[v.i:], []byte(word)) {
		return false
	}
	v.i += len(word)
	return true
}

// PlainRun returns the index of the first byte at or after b[i] that is a '"', a '\\', a
// control character or part of a multi-byte UTF-8 sequence: the bytes before it are
// characters of a string that need no decoding or escaping, one byte each. It reads eight
// bytes at a time, for readers and writers that look at every character of a string (it does
// not need valid JSON).
func PlainRun[T ~string | ~[]byte](b T, i int) int {
	const highs = 0x8080808080808080
	for i+8 <= len(b) {
		w := uint64(b[i]) | uint64(b[i+1])<<8 | uint64(b[i+2])<<16 | uint64(b[i+3])<<24 |
			uint64(b[i+4])<<32 | uint64(b[i+5])<<40 | uint64(b[i+6])<<48 | uint64(b[i+7])<<56
		if strSpecial(w) || w&highs != 0 {
			break
		}
		i += 8
	}
	for i < len(b) && b[i] != '"' && b[i] != '\\' && b[i] >= 0x20 && b[i] < 0x80 {
		i++
	}
	return i
}
