package spool

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"
)

// MaxRecordBytes is the largest record Append accepts. A larger length found in a segment file is
// treated as corruption.
const MaxRecordBytes = 128 << 20

const (
	headerSize      = 16
	frameHeaderSize = 8
)

var segmentMagic = [8]byte{'Q', 'S', 'P', 'O', 'O', 'L', '0', '1'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt marks data that is not a valid segment: a torn tail or a damaged record.
var errCorrupt = errors.New("corrupt segment data")

func appendHeader(dst []byte, created time.Time) []byte {
	dst = append(dst, segmentMagic[:]...)
	return binary.LittleEndian.AppendUint64(dst, uint64(created.UnixNano()))
}

func appendRecord(dst, body []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(body)))
	dst = binary.LittleEndian.AppendUint32(dst, crc32.Checksum(body, castagnoli))
	return append(dst, body...)
}

// segmentReader decodes a segment of a known size. It never allocates more than the bytes left
// in the segment, and every call consumes at least one frame header or ends the segment.
type segmentReader struct {
	br   *bufio.Reader
	size int64 // size of the segment in bytes
	off  int64 // offset just past the header or the last good record
	buf  [headerSize]byte
}

func newSegmentReader(r io.Reader, size int64) *segmentReader {
	return &segmentReader{br: bufio.NewReaderSize(r, 64*1024), size: size}
}

// readHeader reads the segment header and returns the segment creation time.
func (sr *segmentReader) readHeader() (time.Time, error) {
	if sr.size < headerSize {
		return time.Time{}, fmt.Errorf("%w: short header: %d bytes", errCorrupt, sr.size)
	}
	if err := sr.readFull(sr.buf[:headerSize]); err != nil {
		return time.Time{}, err
	}
	if [8]byte(sr.buf[:8]) != segmentMagic {
		return time.Time{}, fmt.Errorf("%w: bad magic %q", errCorrupt, sr.buf[:8])
	}
	sr.off = headerSize
	return time.Unix(0, int64(binary.LittleEndian.Uint64(sr.buf[8:16]))), nil
}

// next returns the next record. It returns io.EOF at the clean end of the segment, an error
// wrapping errCorrupt at the first invalid byte (sr.off then points at it), and any other error
// for an I/O failure.
func (sr *segmentReader) next() ([]byte, error) {
	left := sr.size - sr.off
	if left == 0 {
		return nil, io.EOF
	}
	if left < frameHeaderSize {
		return nil, fmt.Errorf("%w: short record header at offset %d: %d bytes", errCorrupt, sr.off, left)
	}
	if err := sr.readFull(sr.buf[:frameHeaderSize]); err != nil {
		return nil, err
	}
	n := int64(binary.LittleEndian.Uint32(sr.buf[0:4]))
	sum := binary.LittleEndian.Uint32(sr.buf[4:8])
	switch {
	case n == 0:
		return nil, fmt.Errorf("%w: zero record length at offset %d", errCorrupt, sr.off)
	case n > MaxRecordBytes:
		return nil, fmt.Errorf("%w: record length %d at offset %d exceeds %d", errCorrupt, n, sr.off, MaxRecordBytes)
	case n > left-frameHeaderSize:
		return nil, fmt.Errorf("%w: short record body at offset %d: want %d bytes, have %d", errCorrupt, sr.off, n, left-frameHeaderSize)
	}
	body := make([]byte, n)
	if err := sr.readFull(body); err != nil {
		return nil, err
	}
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, fmt.Errorf("%w: CRC mismatch at offset %d: stored %08x, computed %08x", errCorrupt, sr.off, sum, got)
	}
	sr.off += frameHeaderSize + n
	return body, nil
}

func (sr *segmentReader) readFull(p []byte) error {
	if _, err := io.ReadFull(sr.br, p); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			// The file is shorter than its size said: a tail that is not there is a torn tail.
			return fmt.Errorf("%w: unexpected end of data at offset %d", errCorrupt, sr.off)
		}
		return fmt.Errorf("cannot read at offset %d: %w", sr.off, err)
	}
	return nil
}
