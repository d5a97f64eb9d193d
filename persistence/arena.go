package persistence

import "unsafe"

// arenaBlock is the size of an arena's blocks: a pop of 1,000 messages of 256 B copies its
// payloads into five of them instead of a thousand allocations of their own.
const arenaBlock = 64 << 10

// byteArena copies short byte strings read from the database into a few large blocks. What it
// hands out is never written again, and keeps its whole block alive: an arena holds one kind of
// data (payloads, or transactionIds, which the leased-message cache keeps), so that keeping one
// does not keep the other.
type byteArena struct {
	block []byte
}

// bytes returns a copy of b.
func (a *byteArena) bytes(b []byte) []byte {
	if len(b) > arenaBlock/8 {
		return append([]byte(nil), b...)
	}
	if len(b) > cap(a.block)-len(a.block) {
		a.block = make([]byte, 0, arenaBlock)
	}
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
