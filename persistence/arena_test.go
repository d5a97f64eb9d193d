package persistence

import (
	"testing"
	"unsafe"
)

// A claim row's copies share a block sized to that row, so a transactionId the leased-message
// cache keeps holds its row's block alive and nothing more; copies keep their bytes.
func TestArenaBlocksAreSizedToTheRow(t *testing.T) {
	var a byteArena
	a.reserve(10)
	x, y := a.string([]byte("abcd")), a.string([]byte("efgh"))
	if cap(a.block) != 10 {
		t.Fatalf("block of %d bytes after reserving 10", cap(a.block))
	}
	a.reserve(6) // 2 left: a new block
	z := a.string([]byte("ijklmn"))
	if cap(a.block) != 6 || unsafe.StringData(z) == unsafe.StringData(x) {
		t.Fatalf("second row: block of %d bytes", cap(a.block))
	}
	if x != "abcd" || y != "efgh" || z != "ijklmn" {
		t.Fatalf("copies %q %q %q", x, y, z)
	}
	if b := a.bytes([]byte("op")); len(b) != 2 || cap(b) != 2 {
		t.Fatalf("a copy past the reserve: len %d cap %d, want 2 and 2", len(b), cap(b))
	}
}
