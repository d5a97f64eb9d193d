package persistence

import "unsafe"

// byteArena copies short byte strings read from the database into a few blocks instead of an
// allocation each. What it hands out is never written again and keeps its whole block alive, so
// a block is sized to what one claim row holds (reserve) and an arena holds one kind of data:
// the leased-message cache keeps transactionIds, and must not keep payloads or other pops'
// transactionIds alive with them.
type byteArena struct {
	block []byte
}

// reserve makes room for n more bytes, starting a block of n when the current one has less.
func (a *byteArena) reserve(n int) {
	if cap(a.block)-len(a.block) < n {
		a.block = make([]byte, 0, n)
	}
}

// bytes returns a copy of b.
func (a *byteArena) bytes(b []byte) []byte {
	a.reserve(len(b))
	n := len(a.block)
	a.block = append(a.block, b...)
	return a.block[n:len(a.block):len(a.block)]
}

// string returns b as a string of its own.
func (a *byteArena) string(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	c := a.bytes(b)
	return unsafe.String(unsafe.SliceData(c), len(c))
}
