package persistence

import (
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// An array written by appendArrayHeader and appendArrayElement reads back, element by element,
// through the walker that reads PostgreSQL's own (the format is the same both ways).
func TestEncodedArrayReadsBack(t *testing.T) {
	for _, elems := range [][]string{nil, {""}, {"a", "", "ünïcode ✓", string(make([]byte, 300))}} {
		b := appendArrayHeader(nil, pgtype.TextOID, len(elems))
		for _, e := range elems {
			b = appendArrayElement(b, e)
		}
		a := newBinaryArray(b)
		var got []string
		for range elems {
			got = append(got, string(a.next()))
		}
		if a.err != nil || !slices.Equal(got, elems) {
			t.Errorf("wrote %q, read %q (err %v)", elems, got, a.err)
		}
		if a.next(); a.err == nil {
			t.Errorf("%q: an element past the last one read without an error", elems)
		}
	}
}
