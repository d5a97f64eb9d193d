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

// arrayWriter is a one-dimensional array that writes itself in PostgreSQL's binary format (see
// binaryArray) straight into the parameter buffer of a connection taught by
// acceptEncodedArrays. A push writes its per-message arrays so: pgx planned and appended each
// element through interfaces and reflection, 9 % of the broker's CPU under bench cost, and an
// array built beforehand was one more copy of every payload.
type arrayWriter interface {
	appendArray(buf []byte) []byte
}

// appendArrayHeader starts an array of n elements of type elem (an OID), none of them NULL.
func appendArrayHeader(b []byte, elem uint32, n int) []byte {
	b = binary.BigEndian.AppendUint32(b, 1) // dimensions
	b = binary.BigEndian.AppendUint32(b, 0) // flags: no NULL
	b = binary.BigEndian.AppendUint32(b, elem)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	return binary.BigEndian.AppendUint32(b, 1) // lower bound
}

// appendArrayElement appends one element: its length, then its bytes in binary format.
func appendArrayElement[E ~string | ~[]byte](b []byte, e E) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(e)))
	return append(b, e...)
}

// arrayHeaderSize and arrayElementSize size a buffer for appendArrayHeader and
// appendArrayElement.
const (
	arrayHeaderSize  = 20
	arrayElementSize = 4 // and the element's bytes
)

// acceptEncodedArrays teaches a connection's type map to have an arrayWriter given for a
// text[] or uuid[] parameter write itself; every other value goes to pgx's own array codec. It is
// idempotent and cheap, so a push calls it on whatever connection it runs.
func acceptEncodedArrays(m *pgtype.Map) {
	for _, oid := range []uint32{pgtype.TextArrayOID, pgtype.UUIDArrayOID} {
		t, ok := m.TypeForOID(oid)
		if !ok {
			continue
		}
		if _, done := t.Codec.(encodedArrayCodec); done {
			continue
		}
		m.RegisterType(&pgtype.Type{Name: t.Name, OID: oid, Codec: encodedArrayCodec{t.Codec}})
	}
}

// encodedArrayCodec is an array type's codec that also takes an arrayWriter.
type encodedArrayCodec struct{ pgtype.Codec }

func (c encodedArrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if _, ok := value.(arrayWriter); ok && format == pgtype.BinaryFormatCode {
		return encodedArrayPlan{}
	}
	return c.Codec.PlanEncode(m, oid, format, value)
}

type encodedArrayPlan struct{}

func (encodedArrayPlan) Encode(value any, buf []byte) ([]byte, error) {
	return value.(arrayWriter).appendArray(buf), nil
}
