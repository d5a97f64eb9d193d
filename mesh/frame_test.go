package mesh

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	for _, payload := range [][]byte{nil, []byte(`{}`), []byte(`{"queue":"q","partition":"p"}`)} {
		buf.Reset()
		if err := WriteFrame(&buf, TypeMessageAvailable, payload); err != nil {
			t.Fatal(err)
		}
		if got := binary.BigEndian.Uint32(buf.Bytes()); int(got) != 1+len(payload) {
			t.Fatalf("length field %d, want %d", got, 1+len(payload))
		}
		typ, got, err := ReadFrame(&buf, MaxFrameSize)
		if err != nil || typ != TypeMessageAvailable || !bytes.Equal(got, payload) {
			t.Fatalf("ReadFrame = %d %q %v, want %d %q", typ, got, err, TypeMessageAvailable, payload)
		}
	}
}

func TestReadFrameErrors(t *testing.T) {
	frame := func(n uint32, rest ...byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, n), rest...)
	}
	cases := []struct {
		name string
		in   []byte
		max  int
		want error
	}{
		{"clean close", nil, 16, io.EOF},
		{"torn header", []byte{0, 0}, 16, io.ErrUnexpectedEOF},
		{"empty frame", frame(0), 16, ErrEmptyFrame},
		{"over cap", frame(17), 16, ErrFrameTooLarge},
		{"non-positive cap", frame(1, 3), 0, ErrFrameTooLarge},
		{"missing type", frame(1), 16, io.ErrUnexpectedEOF},
		{"torn payload", frame(4, 1, 'a'), 16, io.ErrUnexpectedEOF},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := ReadFrame(bytes.NewReader(c.in), c.max)
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
	if err := WriteFrame(io.Discard, 1, make([]byte, MaxFrameSize)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("WriteFrame over the cap: err = %v", err)
	}
}

// countingReader serves a header and then endless bytes, counting what was read.
type countingReader struct {
	hdr  []byte
	read int
}

func (r *countingReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if r.read < len(r.hdr) {
			p[n] = r.hdr[r.read]
		} else {
			p[n] = 'x'
		}
		n++
		r.read++
	}
	return n, nil
}

// A 64 MiB length is refused from the header alone: nothing past it is read, nothing sized by
// it is allocated.
func TestReadFrameRefusesOversizeBeforeAllocating(t *testing.T) {
	r := &countingReader{hdr: binary.BigEndian.AppendUint32(nil, 64<<20)}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := ReadFrame(r, MaxFrameSize)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("err = %v, want ErrFrameTooLarge", err)
	}
	if r.read != 4 {
		t.Fatalf("read %d bytes, want only the 4-byte length", r.read)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<10 {
		t.Fatalf("allocated %d bytes while refusing the frame", grew)
	}
}

func FuzzReadFrame(f *testing.F) {
	var buf bytes.Buffer
	WriteFrame(&buf, TypeHello, []byte(`{"server_id":"a"}`))
	f.Add(buf.Bytes(), uint16(1024))
	f.Add([]byte{0, 0, 0, 0}, uint16(16))
	f.Add([]byte{4, 0, 0, 0, 1}, uint16(16))
	f.Add([]byte{0, 0, 0, 3, 40, '{', '}', 0, 0}, uint16(3))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3}, uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, m uint16) {
		for _, max := range []int{int(m), MaxFrameSize} {
			typ, payload, err := ReadFrame(bytes.NewReader(data), max)
			if err != nil {
				if payload != nil {
					t.Fatalf("payload returned with error %v", err)
				}
				continue
			}
			if 1+len(payload) > max {
				t.Fatalf("payload of %d bytes accepted under cap %d", len(payload), max)
			}
			var out bytes.Buffer
			if err := WriteFrame(&out, typ, payload); err != nil {
				t.Fatalf("cannot re-encode an accepted frame: %v", err)
			}
			if !bytes.HasPrefix(data, out.Bytes()) {
				t.Fatalf("accepted frame does not re-encode to the input")
			}
		}
	})
}
