package persistence

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// pgEpoch is the origin of PostgreSQL's binary timestamps (microseconds since it).
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// binaryColumns checks that every column of a result came in binary format, which is what pgx
// asks for the types it knows and what readClaim decodes.
func binaryColumns(fields []pgconn.FieldDescription) error {
	for _, f := range fields {
		if f.Format != pgtype.BinaryFormatCode {
			return fmt.Errorf("column %s came in text format", f.Name)
		}
	}
	return nil
}

// binaryArray walks a one-dimensional array as PostgreSQL sends it in binary format: a header
// (dimensions, a flags word, the element type, then each dimension's size and lower bound) and
// each element as a 4-byte length (-1 for NULL) and its bytes. A claim reads its segments'
// arrays so, as the row's own bytes, instead of a row per message.
type binaryArray struct {
	b    []byte
	left int // elements not read yet
	err  error
}

var errBadArray = errors.New("malformed binary array")

func newBinaryArray(b []byte) binaryArray {
	if len(b) < 12 {
		if b == nil {
			return binaryArray{} // NULL: no elements
		}
		return binaryArray{err: errBadArray}
	}
	switch dims := binary.BigEndian.Uint32(b); {
	case dims == 0:
		return binaryArray{}
	case dims != 1 || len(b) < 20:
		return binaryArray{err: errBadArray}
	}
	return binaryArray{b: b[20:], left: int(int32(binary.BigEndian.Uint32(b[12:])))}
}

// next returns the next element's bytes, nil for NULL. Past the last element, or on malformed
// input, it sets err and returns nil.
func (a *binaryArray) next() []byte {
	if a.err != nil {
		return nil
	}
	if a.left <= 0 || len(a.b) < 4 {
		a.err = errBadArray
		return nil
	}
	a.left--
	n := int32(binary.BigEndian.Uint32(a.b))
	a.b = a.b[4:]
	if n < 0 {
		return nil
	}
	if int(n) > len(a.b) {
		a.err = errBadArray
		return nil
	}
	e := a.b[:n:n]
	a.b = a.b[n:]
	return e
}
