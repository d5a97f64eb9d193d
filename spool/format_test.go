package spool

import (
	"bytes"
	"errors"
	"hash/crc32"
	"io"
	"testing"
	"time"
)

// FuzzReadSegment feeds arbitrary bytes to the segment decoder as a segment file. It must never
// panic, never return a record whose CRC does not match, and always end: every record consumes
// bytes, and the good records re-encode to exactly the bytes before the reported offset.
func FuzzReadSegment(f *testing.F) {
	hdr := appendHeader(nil, time.Unix(1700000000, 0))
	seg := appendRecord(appendRecord(slicesClone(hdr), []byte(`{"a":1}`)), []byte("second record"))
	f.Add([]byte{})
	f.Add(hdr[:7])
	f.Add(hdr)
	f.Add(seg)
	f.Add(seg[:len(seg)-3])
	f.Add(append(slicesClone(seg), 0, 0, 0, 0, 0, 0, 0, 0))
	f.Add(append(slicesClone(hdr), 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4))
	bad := slicesClone(seg)
	bad[len(hdr)+frameHeaderSize] ^= 1
	f.Add(bad)

	f.Fuzz(func(t *testing.T, data []byte) {
		sr := newSegmentReader(bytes.NewReader(data), int64(len(data)))
		created, err := sr.readHeader()
		if err != nil {
			if !errors.Is(err, errCorrupt) {
				t.Fatalf("header: error %v does not wrap errCorrupt", err)
			}
			return
		}
		reencoded := appendHeader(nil, created)
		for i := 0; ; i++ {
			if i > len(data)/(frameHeaderSize+1) {
				t.Fatalf("%d records from %d bytes", i, len(data))
			}
			before := sr.off
			rec, err := sr.next()
			if errors.Is(err, io.EOF) {
				if sr.off != int64(len(data)) {
					t.Fatalf("EOF at offset %d of %d", sr.off, len(data))
				}
				break
			}
			if err != nil {
				if !errors.Is(err, errCorrupt) {
					t.Fatalf("error %v does not wrap errCorrupt", err)
				}
				if sr.off != before {
					t.Fatalf("offset moved from %d to %d on an error", before, sr.off)
				}
				break
			}
			if len(rec) == 0 || len(rec) > MaxRecordBytes {
				t.Fatalf("record of %d bytes", len(rec))
			}
			if sr.off != before+frameHeaderSize+int64(len(rec)) {
				t.Fatalf("offset %d after a %d byte record at %d", sr.off, len(rec), before)
			}
			stored := data[before+4 : before+8]
			if crc32.Checksum(rec, castagnoli) != uint32(stored[0])|uint32(stored[1])<<8|uint32(stored[2])<<16|uint32(stored[3])<<24 {
				t.Fatalf("record at %d returned with a CRC mismatch", before)
			}
			reencoded = appendRecord(reencoded, rec)
		}
		if !bytes.Equal(reencoded, data[:sr.off]) {
			t.Fatalf("good records do not re-encode to the first %d bytes", sr.off)
		}
	})
}

func slicesClone(b []byte) []byte { return append([]byte(nil), b...) }
