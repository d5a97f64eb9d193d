package http

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"queen/jsonscan"
)

// checkBody applies the boundary's string rules to every key and string value of a JSON body,
// naming the offending field by its path (items[3].transactionId). It looks at strings only:
// syntax errors are left to the route's decoder, which reports them in its own words, so the
// walk simply stops where the JSON stops making sense. The values of freeJSON fields are
// skipped over (sanitizePayload owns them). The array entries outside them, together, may be
// at most maxItems: a push of millions of tiny items is refused (413) before it is decoded.
func checkBody(body []byte, maxItems int) error {
	w := bodyWalker{b: body, maxItems: maxItems}
	w.space()
	if w.i < len(w.b) && (w.b[w.i] == '{' || w.b[w.i] == '[') {
		w.value(0)
	}
	return w.err
}

// bodyWalker is a recursive-descent reader over a body. path holds the field names and array
// indices down to the current value; it is only turned into text for an error.
type bodyWalker struct {
	b    []byte
	i    int
	path []pathElem
	err  error
	stop bool // malformed JSON or an error: nothing more to check
	// items counts array entries outside freeJSON values, up to maxItems.
	items, maxItems int
}

func (w *bodyWalker) space() {
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

// pathElem is a field name or, with index >= 0, an array position. The name is the body's
// own bytes (decoded when it had escapes): the path is kept for every value but turned into
// text only for an error, so walking a body allocates nothing per field.
type pathElem struct {
	key   []byte
	index int
}

func (w *bodyWalker) field() string {
	s := ""
	for _, p := range w.path {
		switch {
		case p.index >= 0:
			s += "[" + strconv.Itoa(p.index) + "]"
		case s == "":
			s = string(p.key)
		default:
			s += "." + string(p.key)
		}
	}
	if s == "" {
		return "request body"
	}
	return s
}

func (w *bodyWalker) fail(err error) {
	if w.err == nil {
		w.err = err
	}
	w.stop = true
}

// key is the innermost field name, for the length cap of names.
func (w *bodyWalker) key() []byte {
	for j := len(w.path) - 1; j >= 0; j-- {
		if w.path[j].index < 0 {
			return w.path[j].key
		}
	}
	return nil
}

func (w *bodyWalker) value(depth int) {
	if depth > maxBodyDepth {
		w.fail(badf(fmt.Sprintf("%s nests deeper than %d levels", w.field(), maxBodyDepth)))
		return
	}
	w.space()
	if w.i >= len(w.b) {
		w.stop = true
		return
	}
	switch w.b[w.i] {
	case '{':
		w.object(depth)
	case '[':
		w.array(depth)
	case '"':
		limit := maxBodyText
		if nameKey(w.key()) {
			limit = maxName
		}
		w.str(false, limit)
	default:
		w.scalar()
	}
}

func (w *bodyWalker) object(depth int) {
	w.i++ // {
	for !w.stop {
		w.space()
		if w.i >= len(w.b) {
			w.stop = true
			return
		}
		if w.b[w.i] == '}' {
			w.i++
			return
		}
		if w.b[w.i] != '"' {
			w.stop = true
			return
		}
		k, ok := w.str(true, maxBodyText)
		if !ok {
			return
		}
		w.space()
		if w.i >= len(w.b) || w.b[w.i] != ':' {
			w.stop = true
			return
		}
		w.i++
		w.path = append(w.path, pathElem{key: k, index: -1})
		if freeJSON(k) {
			w.skip()
		} else {
			w.value(depth + 1)
		}
		w.path = w.path[:len(w.path)-1]
		w.space()
		if w.i < len(w.b) && w.b[w.i] == ',' {
			w.i++
		}
	}
}

func (w *bodyWalker) array(depth int) {
	w.i++ // [
	for n := 0; !w.stop; n++ {
		w.space()
		if w.i >= len(w.b) {
			w.stop = true
			return
		}
		if w.b[w.i] == ']' {
			w.i++
			return
		}
		if w.items++; w.items > w.maxItems {
			w.fail(&tooLarge{fmt.Sprintf("%s: a request body may hold at most %d array entries (QUEEN_MAX_ITEMS_PER_REQUEST)", w.field(), w.maxItems)})
			return
		}
		w.path = append(w.path, pathElem{index: n})
		w.value(depth + 1)
		w.path = w.path[:len(w.path)-1]
		w.space()
		if w.i < len(w.b) && w.b[w.i] == ',' {
			w.i++
		}
	}
}

// scalar steps over a number, true, false or null.
func (w *bodyWalker) scalar() {
	start := w.i
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			if w.i == start {
				w.stop = true
			}
			return
		}
		w.i++
	}
}

// str reads the string at w.i, a field name when isKey, checking it against the boundary's
// rules. It returns the string as the decoders will see it (keys are looked up by name), and
// whether to go on.
func (w *bodyWalker) str(isKey bool, limit int) ([]byte, bool) {
	// name is what an error calls the string: made only for an error.
	name := func() string {
		if isKey {
			return w.field() + " key"
		}
		return w.field()
	}
	w.i++ // opening quote
	start, runes, plain := w.i, 0, true
	for w.i < len(w.b) {
		// The plain run first, eight bytes at a time: one byte, one character.
		j := jsonscan.PlainRun(w.b, w.i)
		runes += j - w.i
		if w.i = j; w.i >= len(w.b) {
			break
		}
		c := w.b[w.i]
		switch {
		case c == '"':
			end := w.i
			w.i++
			if runes > limit {
				w.fail(badf(fmt.Sprintf("%s must be at most %d characters", name(), limit)))
				return nil, false
			}
			if plain {
				return w.b[start:end], true
			}
			var s string
			if json.Unmarshal(w.b[start-1:w.i], &s) != nil {
				w.stop = true
				return nil, false
			}
			return []byte(s), true
		case c == '\\':
			plain = false
			if w.i+1 >= len(w.b) {
				w.stop = true
				return nil, false
			}
			if w.b[w.i+1] == 'u' {
				if w.i+6 > len(w.b) {
					w.stop = true
					return nil, false
				}
				if string(w.b[w.i+2:w.i+6]) == "0000" {
					w.fail(badf(name() + ` must not contain the character \u0000`))
					return nil, false
				}
				w.i += 6
			} else {
				w.i += 2
			}
			runes++
		case c < utf8.RuneSelf:
			w.i++
			runes++
		default:
			r, size := utf8.DecodeRune(w.b[w.i:])
			if r == utf8.RuneError && size == 1 {
				w.fail(badf(name() + " must be valid UTF-8"))
				return nil, false
			}
			w.i += size
			runes++
		}
	}
	w.stop = true
	return nil, false
}

// skip steps over one JSON value of any depth without looking inside its strings.
func (w *bodyWalker) skip() {
	w.space()
	depth := 0
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case '"':
			// The string ends at the first quote after an even run of backslashes (an odd run
			// escapes it); IndexByte finds the candidates many bytes at a time, which matters
			// for payloads, the bulk of a push.
			start := w.i + 1
			w.i = start
			for {
				j := bytes.IndexByte(w.b[w.i:], '"')
				if j < 0 { // the body ends inside the string
					w.i, w.stop = len(w.b), true
					return
				}
				q, escapes := w.i+j, 0
				for k := q - 1; k >= start && w.b[k] == '\\'; k-- {
					escapes++
				}
				w.i = q + 1
				if escapes%2 == 0 {
					break
				}
			}
		case '{', '[':
			depth++
			w.i++
		case '}', ']':
			if depth == 0 {
				return
			}
			depth--
			w.i++
		case ',':
			if depth == 0 {
				return
			}
			w.i++
		default:
			w.i++
		}
		if depth == 0 && w.i > 0 && (w.b[w.i-1] == '"' || w.b[w.i-1] == '}' || w.b[w.i-1] == ']') {
			return
		}
	}
}
