package spool

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"queen/testkit"
)

func openSpool(t *testing.T, dir string, segmentBytes int64, logs *testkit.LogBuffer) *Spool {
	t.Helper()
	return openWith(t, Options{Dir: dir, SegmentBytes: segmentBytes}, logs)
}

func openWith(t *testing.T, o Options, logs *testkit.LogBuffer) *Spool {
	t.Helper()
	if logs != nil {
		o.Log = slog.New(slog.NewTextHandler(logs, nil))
	}
	s, err := Open(o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// crash drops the Spool the way a killed process would: files closed, nothing sealed.
func crash(t *testing.T, s *Spool) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active != nil {
		_ = s.active.f.Close()
		s.active = nil
	}
	_ = s.lock.Close()
	s.closed = true
}

func record(i int) []byte {
	// Varying sizes, JSON like the broker's records.
	return fmt.Appendf(nil, `{"i":%d,"pad":%q}`, i, strings.Repeat("x", i%97))
}

func mustAppend(t *testing.T, s *Spool, recs ...[]byte) {
	t.Helper()
	if err := s.Append(recs); err != nil {
		t.Fatalf("Append: %v", err)
	}
}

// drainAll drains everything sealed and returns the records in delivery order.
func drainAll(t *testing.T, s *Spool, maxBatch int) [][]byte {
	t.Helper()
	var got [][]byte
	n, err := s.Drain(context.Background(), maxBatch, func(batch [][]byte) (map[int]string, error) {
		if len(batch) == 0 || len(batch) > maxBatch {
			t.Errorf("batch of %d records; maxBatch %d", len(batch), maxBatch)
		}
		got = append(got, batch...)
		return nil, nil
	})
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if n != len(got) {
		t.Fatalf("Drain returned %d; fn saw %d records", n, len(got))
	}
	return got
}

func equalRecords(t *testing.T, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("record %d = %q, want %q", i, got[i], want[i])
		}
	}
}

func checkStats(t *testing.T, s *Spool, segments int, records int64, failed int64) Stats {
	t.Helper()
	st := s.Stats()
	if st.Segments != segments || st.Records != records || st.Failed != failed {
		t.Fatalf("Stats = %+v; want Segments %d, Records %d, Failed %d", st, segments, records, failed)
	}
	if segments == 0 && (st.Bytes != 0 || !st.Oldest.IsZero()) {
		t.Fatalf("Stats = %+v; want no bytes and no oldest when nothing is pending", st)
	}
	return st
}

func segmentFiles(t *testing.T, dir, ext string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*"+ext))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// diskBytes sums the sizes of the segment files.
func diskBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	for _, p := range append(segmentFiles(t, dir, sealedExt), segmentFiles(t, dir, activeExt)...) {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}

func TestRoundTripAcrossSegments(t *testing.T) {
	dir := t.TempDir()
	s := openSpool(t, dir, 4096, nil)
	before := time.Now()
	var want [][]byte
	for i := 0; len(want) < 3000; i++ {
		call := make([][]byte, min(1+i%7, 3000-len(want)))
		for j := range call {
			call[j] = record(len(want))
			want = append(want, call[j])
		}
		mustAppend(t, s, call...)
	}
	st := s.Stats()
	if st.Records != 3000 || st.Segments < 10 {
		t.Fatalf("Stats = %+v; want 3000 records in many segments", st)
	}
	if st.Oldest.Before(before.Truncate(time.Nanosecond)) || st.Oldest.After(time.Now()) {
		t.Fatalf("Oldest %v not within the appends (started %v)", st.Oldest, before)
	}
	if st.Bytes != diskBytes(t, dir) {
		t.Fatalf("Stats.Bytes %d; files hold %d", st.Bytes, diskBytes(t, dir))
	}
	if got := len(segmentFiles(t, dir, sealedExt)); got != st.Segments-1 {
		t.Fatalf("%d sealed files; Stats counts %d segments with the active one", got, st.Segments)
	}
	// Drain sees only sealed segments.
	got := drainAll(t, s, 33)
	if len(got) >= len(want) || len(got) == 0 {
		t.Fatalf("drain before Seal delivered %d of %d records", len(got), len(want))
	}
	equalRecords(t, got, want[:len(got)])
	if err := s.Seal(); err != nil {
		t.Fatal(err)
	}
	rest := drainAll(t, s, 33)
	equalRecords(t, append(got, rest...), want)
	checkStats(t, s, 0, 0, 0)
	if files := append(segmentFiles(t, dir, sealedExt), segmentFiles(t, dir, activeExt)...); len(files) != 0 {
		t.Fatalf("segments left after drain: %v", files)
	}
}

func TestReopenKeepsRecordsAndStats(t *testing.T) {
	dir := t.TempDir()
	s := openSpool(t, dir, 1024, nil)
	var want [][]byte
	for i := range 200 {
		want = append(want, record(i))
		mustAppend(t, s, want[i])
	}
	st := s.Stats()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Append([][]byte{record(0)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v; want ErrClosed", err)
	}
	s = openSpool(t, dir, 1024, nil)
	st2 := s.Stats()
	st.Syncs, st2.Syncs = 0, 0
	if st != st2 {
		t.Fatalf("Stats after reopen = %+v; before = %+v", st2, st)
	}
	mustAppend(t, s, record(200))
	want = append(want, record(200))
	if err := s.Seal(); err != nil {
		t.Fatal(err)
	}
	equalRecords(t, drainAll(t, s, 1000), want)
	checkStats(t, s, 0, 0, 0)
}

func TestSecondOpenOfDirFails(t *testing.T) {
	dir := t.TempDir()
	openSpool(t, dir, 0, nil)
	if s, err := Open(Options{Dir: dir}); err == nil {
		_ = s.Close()
		t.Fatal("a second Open of the same directory succeeded")
	}
}

func TestSealAndAppendEdgeCases(t *testing.T) {
	dir := t.TempDir()
	s := openSpool(t, dir, 0, nil)
	for range 3 {
		if err := s.Seal(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Append(nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Append([][]byte{[]byte("a"), {}}); err == nil {
		t.Fatal("Append of an empty record succeeded")
	}
	if err := s.Append([][]byte{make([]byte, MaxRecordBytes+1)}); err == nil {
		t.Fatal("Append of an oversized record succeeded")
	}
	checkStats(t, s, 0, 0, 0)
	if files, _ := os.ReadDir(dir); len(files) != 2 { // failed/ and the lock file
		t.Fatalf("files after no-op calls: %v", files)
	}
	if _, err := s.Drain(context.Background(), 0, nil); err == nil {
		t.Fatal("Drain with maxBatch 0 succeeded")
	}
}

// TestConcurrentAppend: 50 goroutines append calls of 1..3 records while Drain runs; every
// record is delivered exactly once, each call's records contiguous, each goroutine's in order.
func TestConcurrentAppend(t *testing.T) {
	const goroutines, calls = 50, 40
	dir := t.TempDir()
	s := openSpool(t, dir, 8192, nil)

	var got [][]byte
	collect := func(batch [][]byte) (map[int]string, error) {
		got = append(got, batch...)
		return nil, nil
	}
	stop := make(chan struct{})
	drained := make(chan error)
	go func() { // drains what gets sealed while the appends run
		for {
			if _, err := s.Drain(context.Background(), 50, collect); err != nil {
				drained <- err
				return
			}
			select {
			case <-stop:
				drained <- nil
				return
			default:
				runtime.Gosched()
			}
		}
	}()

	var wg sync.WaitGroup
	total := 0
	for g := range goroutines {
		n := 0
		for c := range calls {
			n += 1 + (g+c)%3
		}
		total += n
		wg.Go(func() {
			for c := range calls {
				call := make([][]byte, 1+(g+c)%3)
				for k := range call {
					call[k] = fmt.Appendf(nil, "%d/%d/%d/%d", g, c, k, len(call))
				}
				if err := s.Append(call); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d appends from %d goroutines, %d fsyncs", goroutines*calls, goroutines, s.Stats().Syncs)
	close(stop)
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	if err := s.Seal(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Drain(context.Background(), 50, collect); err != nil {
		t.Fatal(err)
	}

	if len(got) != total {
		t.Fatalf("delivered %d records; appended %d", len(got), total)
	}
	nextCall := make([]int, goroutines)
	for i := 0; i < len(got); {
		var g, c, k, n int
		if _, err := fmt.Sscanf(string(got[i]), "%d/%d/%d/%d", &g, &c, &k, &n); err != nil {
			t.Fatalf("record %d %q: %v", i, got[i], err)
		}
		if k != 0 || c != nextCall[g] {
			t.Fatalf("record %d %q: want call %d of goroutine %d to start here", i, got[i], nextCall[g], g)
		}
		for k := range n {
			if want := fmt.Sprintf("%d/%d/%d/%d", g, c, k, n); i+k >= len(got) || string(got[i+k]) != want {
				t.Fatalf("record %d: want %q (call not contiguous)", i+k, want)
			}
		}
		nextCall[g]++
		i += n
	}
	for g, c := range nextCall {
		if c != calls {
			t.Fatalf("goroutine %d: %d calls delivered, want %d", g, c, calls)
		}
	}
	checkStats(t, s, 0, 0, 0)
}

// TestGroupCommit: 100 concurrent single-record appends share fsyncs. The first fsync is held
// until all 100 records are written, so everything after it fits in one more fsync.
func TestGroupCommit(t *testing.T) {
	const n = 100
	s := openSpool(t, t.TempDir(), 0, nil)
	release := make(chan struct{})
	var once sync.Once
	s.testHookBeforeSync = func() { once.Do(func() { <-release }) }

	var written sync.WaitGroup
	written.Add(n)
	s.testHookAfterWrite = written.Done

	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := s.Append([][]byte{record(i)}); err != nil {
				t.Error(err)
			}
		})
	}
	written.Wait() // every record is written; the writers now wait for fsyncs
	close(release)
	wg.Wait()
	syncs := s.Stats().Syncs
	t.Logf("%d appends, %d fsyncs", n, syncs)
	if syncs >= n || syncs > 2 {
		t.Fatalf("%d fsyncs for %d concurrent appends; want at most 2", syncs, n)
	}
	checkStats(t, s, 1, n, 0)
}

// TestTornTail: a crash leaves garbage after the good records of the active segment. Open drops
// it with a Warn line giving the byte count, seals the segment and the good records drain.
func TestTornTail(t *testing.T) {
	frame := appendRecord(nil, []byte(`{"torn":true}`))
	cases := []struct {
		name string
		tail []byte
	}{
		{"short length", []byte{0x05, 0x00, 0x00}},
		{"short frame header", frame[:6]},
		{"short body", frame[:len(frame)-3]},
		{"crc mismatch", append(slices.Clone(frame[:len(frame)-1]), frame[len(frame)-1]^0xff)},
		{"zero filled", make([]byte, 4096)},
		{"oversized length", binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, MaxRecordBytes+1), 0)},
		{"garbage", bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef, 0x42}, 301)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openSpool(t, dir, 0, nil)
			var want [][]byte
			for i := range 20 {
				want = append(want, record(i))
			}
			mustAppend(t, s, want[:5]...)
			mustAppend(t, s, want[5:]...)
			good := s.Stats().Bytes
			crash(t, s)

			active := segmentFiles(t, dir, activeExt)
			if len(active) != 1 {
				t.Fatalf("active files: %v", active)
			}
			appendToFile(t, active[0], tc.tail)

			logs := &testkit.LogBuffer{}
			s = openSpool(t, dir, 0, logs)
			warns := logs.Lines("level=WARN")
			if len(warns) != 1 || !strings.Contains(warns[0], fmt.Sprintf("dropped_bytes=%d", len(tc.tail))) {
				t.Fatalf("want one Warn line dropping %d bytes; got %q", len(tc.tail), warns)
			}
			if len(segmentFiles(t, dir, activeExt)) != 0 || len(segmentFiles(t, dir, sealedExt)) != 1 {
				t.Fatal("the recovered active segment was not sealed")
			}
			st := checkStats(t, s, 1, 20, 0)
			if st.Bytes != good || diskBytes(t, dir) != good {
				t.Fatalf("Stats.Bytes %d, file %d bytes; want %d (tail truncated)", st.Bytes, diskBytes(t, dir), good)
			}
			equalRecords(t, drainAll(t, s, 7), want)
			checkStats(t, s, 0, 0, 0)
		})
	}
}

// TestTornOnlyRecord: a crash in the middle of the only write leaves a segment without a good
// record; Open deletes it.
func TestTornOnlyRecord(t *testing.T) {
	dir := t.TempDir()
	s := openSpool(t, dir, 0, nil)
	mustAppend(t, s, record(1))
	crash(t, s)
	active := segmentFiles(t, dir, activeExt)[0]
	if err := os.Truncate(active, headerSize+5); err != nil {
		t.Fatal(err)
	}
	logs := &testkit.LogBuffer{}
	s = openSpool(t, dir, 0, logs)
	if w := logs.Lines("level=WARN"); len(w) != 1 || !strings.Contains(w[0], "dropped_bytes=5") {
		t.Fatalf("warnings %q", w)
	}
	checkStats(t, s, 0, 0, 0)
	if files := append(segmentFiles(t, dir, activeExt), segmentFiles(t, dir, sealedExt)...); len(files) != 0 {
		t.Fatalf("files left: %v", files)
	}
	// Sequence numbers keep increasing past the deleted segment.
	mustAppend(t, s, record(2))
	if err := s.Seal(); err != nil {
		t.Fatal(err)
	}
	if got := filepath.Base(segmentFiles(t, dir, sealedExt)[0]); got != "00000000000000000002.seg" {
		t.Fatalf("new segment %s", got)
	}
}

func appendToFile(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// threeSegments appends 3 sealed segments of 10 records each and returns the records.
func threeSegments(t *testing.T, s *Spool) [][]byte {
	t.Helper()
	var all [][]byte
	for seg := range 3 {
		var recs [][]byte
		for i := range 10 {
			recs = append(recs, record(seg*10+i))
		}
		mustAppend(t, s, recs...)
		if err := s.Seal(); err != nil {
			t.Fatal(err)
		}
		all = append(all, recs...)
	}
	return all
}

// recordOffset returns the file offset of record i of a segment.
func recordOffset(t *testing.T, path string, i int) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off := int64(headerSize)
	for range i {
		off += frameHeaderSize + int64(binary.LittleEndian.Uint32(b[off:]))
	}
	return off
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x55
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptRecordInSealedSegmentAtOpen: a CRC mismatch at record 4 of the middle segment
// drops records 4..9 of that segment at Open (logged); the other segments drain whole.
func TestCorruptRecordInSealedSegmentAtOpen(t *testing.T) {
	dir := t.TempDir()
	s := openSpool(t, dir, 0, nil)
	all := threeSegments(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	segs := segmentFiles(t, dir, sealedExt)
	off := recordOffset(t, segs[1], 4)
	fi, _ := os.Stat(segs[1])
	flipByte(t, segs[1], off+frameHeaderSize+2) // in the body: CRC mismatch

	logs := &testkit.LogBuffer{}
	s = openSpool(t, dir, 0, logs)
	w := logs.Lines("level=WARN")
	if len(w) != 1 || !strings.Contains(w[0], fmt.Sprintf("dropped_bytes=%d", fi.Size()-off)) || !strings.Contains(w[0], "CRC mismatch") {
		t.Fatalf("want one Warn line dropping %d bytes for a CRC mismatch; got %q", fi.Size()-off, w)
	}
	checkStats(t, s, 3, 24, 0)
	want := slices.Concat(all[:14], all[20:])
	equalRecords(t, drainAll(t, s, 4), want)
	checkStats(t, s, 0, 0, 0)
}

// TestCorruptRecordFoundByDrain: damage that appears after Open is found by Drain, which
// delivers the segment up to it, logs it and goes on with the later segments.
func TestCorruptRecordFoundByDrain(t *testing.T) {
	dir := t.TempDir()
	logs := &testkit.LogBuffer{}
	s := openSpool(t, dir, 0, logs)
	all := threeSegments(t, s)
	segs := segmentFiles(t, dir, sealedExt)
	off := recordOffset(t, segs[1], 6)
	flipByte(t, segs[1], off+5) // in the stored CRC
	fi, _ := os.Stat(segs[1])

	equalRecords(t, drainAll(t, s, 4), slices.Concat(all[:16], all[20:]))
	w := logs.Lines("level=WARN")
	if len(w) != 1 || !strings.Contains(w[0], fmt.Sprintf("dropped_bytes=%d", fi.Size()-off)) {
		t.Fatalf("want one Warn line dropping %d bytes; got %q", fi.Size()-off, w)
	}
	checkStats(t, s, 0, 0, 0)
}

// TestDrainTransientErrorKeepsSegments: fn fails in the middle of the second segment; that
// segment and the third stay, and the next Drain delivers the second one from its start.
func TestDrainTransientErrorKeepsSegments(t *testing.T) {
	dir := t.TempDir()
	s := openSpool(t, dir, 0, nil)
	all := threeSegments(t, s)
	before := s.Stats()

	down := errors.New("database down")
	var got [][]byte
	calls := 0
	n, err := s.Drain(context.Background(), 4, func(batch [][]byte) (map[int]string, error) {
		calls++
		if calls == 5 { // segment 1: batches 1-3; segment 2: batch 4 ok, batch 5 fails
			return nil, down
		}
		got = append(got, batch...)
		return nil, nil
	})
	if !errors.Is(err, down) {
		t.Fatalf("Drain error %v; want %v", err, down)
	}
	if n != 14 {
		t.Fatalf("Drain delivered %d; want 14", n)
	}
	equalRecords(t, got, all[:14])
	st := checkStats(t, s, 2, 20, 0)
	if !st.Oldest.After(before.Oldest) || st.Bytes >= before.Bytes {
		t.Fatalf("Stats after the first segment went = %+v; before %+v", st, before)
	}
	if files := segmentFiles(t, dir, sealedExt); len(files) != 2 {
		t.Fatalf("segments left: %v", files)
	}

	// A crash now changes nothing: reopen and drain.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openSpool(t, dir, 0, nil)
	checkStats(t, s, 2, 20, 0)
	equalRecords(t, drainAll(t, s, 4), all[10:])
	checkStats(t, s, 0, 0, 0)
}

func TestDrainStopsOnContextDone(t *testing.T) {
	s := openSpool(t, t.TempDir(), 0, nil)
	all := threeSegments(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	var got [][]byte
	n, err := s.Drain(ctx, 5, func(batch [][]byte) (map[int]string, error) {
		got = append(got, batch...)
		if len(got) == 15 {
			cancel()
		}
		return nil, nil
	})
	if !errors.Is(err, context.Canceled) || n != 15 {
		t.Fatalf("Drain = %d, %v; want 15, context.Canceled", n, err)
	}
	checkStats(t, s, 2, 20, 0)
	equalRecords(t, drainAll(t, s, 5), all[10:])
}

// TestRefusedRecordsGoToFailed: refused records are written to failed/records.jsonl with their
// reason, logged and counted; the rest is delivered and the segments deleted.
func TestRefusedRecordsGoToFailed(t *testing.T) {
	dir := t.TempDir()
	logs := &testkit.LogBuffer{}
	s := openSpool(t, dir, 0, logs)
	all := threeSegments(t, s)
	raw := []byte{0xff, 0x00, 0x01}
	mustAppend(t, s, raw, record(30))
	if err := s.Seal(); err != nil {
		t.Fatal(err)
	}

	var got [][]byte
	n, err := s.Drain(context.Background(), 4, func(batch [][]byte) (map[int]string, error) {
		refused := map[int]string{}
		for i, r := range batch {
			switch {
			case bytes.Equal(r, all[3]), bytes.Equal(r, all[17]):
				refused[i] = "queue dropped"
			case bytes.Equal(r, raw):
				refused[i] = "not JSON"
			case bytes.Equal(r, all[25]):
				refused[i+100] = "out of range: ignored"
				got = append(got, r)
			default:
				got = append(got, r)
			}
		}
		return refused, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Concat(all[:3], all[4:17], all[18:], [][]byte{record(30)})
	equalRecords(t, got, want)
	if n != len(want) {
		t.Fatalf("Drain delivered %d; want %d", n, len(want))
	}
	checkStats(t, s, 0, 0, 3)
	if files := segmentFiles(t, dir, sealedExt); len(files) != 0 {
		t.Fatalf("segments left: %v", files)
	}

	lines := readFailed(t, dir)
	if len(lines) != 3 {
		t.Fatalf("failed lines: %+v", lines)
	}
	checkLine := func(l failedLine, seg string, index int64, reason string, rec []byte) {
		t.Helper()
		if l.Segment != seg || l.Index != index || l.Reason != reason {
			t.Fatalf("failed line %+v; want segment %s index %d reason %q", l, seg, index, reason)
		}
		stored := []byte(l.Record)
		if l.RecordBase64 != nil {
			stored = l.RecordBase64
		}
		if !bytes.Equal(stored, rec) {
			t.Fatalf("failed line holds %q; want %q", stored, rec)
		}
	}
	checkLine(lines[0], "00000000000000000001.seg", 3, "queue dropped", all[3])
	checkLine(lines[1], "00000000000000000002.seg", 7, "queue dropped", all[17])
	checkLine(lines[2], "00000000000000000004.seg", 0, "not JSON", raw)
	if lines[2].RecordBase64 == nil {
		t.Fatal("a record that is not JSON is not stored base64")
	}
	refusedWarns, ignoredWarns := 0, 0
	for _, w := range logs.Lines("level=WARN") {
		switch {
		case strings.Contains(w, "moved to failed/"):
			refusedWarns++
		case strings.Contains(w, "outside its batch"):
			ignoredWarns++
		}
	}
	if refusedWarns != 3 || ignoredWarns != 1 {
		t.Fatalf("%d refused and %d ignored Warn lines; want 3 and 1: %q", refusedWarns, ignoredWarns, logs.Lines("level=WARN"))
	}

	// The counter survives a restart, and a torn last line of failed/ is cut off.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	appendToFile(t, filepath.Join(dir, failedDirName, failedFileName), []byte(`{"time":"20`))
	logs = &testkit.LogBuffer{}
	s = openSpool(t, dir, 0, logs)
	checkStats(t, s, 0, 0, 3)
	if w := logs.Lines("level=WARN"); len(w) != 1 || !strings.Contains(w[0], "dropped_bytes=11") {
		t.Fatalf("warnings %q", w)
	}
	if lines := readFailed(t, dir); len(lines) != 3 {
		t.Fatalf("failed lines after reopen: %d", len(lines))
	}
}

func readFailed(t *testing.T, dir string) []failedLine {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, failedDirName, failedFileName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []failedLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l failedLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("failed line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestOldestFollowsTheOldestSegment: Oldest is the creation time of the oldest pending segment,
// kept across a restart.
func TestOldestFollowsTheOldestSegment(t *testing.T) {
	dir := t.TempDir()
	s := openSpool(t, dir, 0, nil)
	var created []time.Time
	for i := range 3 {
		mustAppend(t, s, record(i))
		s.mu.Lock()
		created = append(created, s.active.created)
		s.mu.Unlock()
		if err := s.Seal(); err != nil {
			t.Fatal(err)
		}
		// The next segment's header time must be later for the check below.
		for !time.Now().After(created[i]) {
			runtime.Gosched()
		}
	}
	if got := s.Stats().Oldest; !got.Equal(created[0]) {
		t.Fatalf("Oldest %v; want %v", got, created[0])
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openSpool(t, dir, 0, nil)
	if got := s.Stats().Oldest; !got.Equal(created[0]) {
		t.Fatalf("Oldest after reopen %v; want %v", got, created[0])
	}
	calls := 0
	_, err := s.Drain(context.Background(), 10, func([][]byte) (map[int]string, error) {
		calls++
		if calls == 2 {
			return nil, errors.New("down")
		}
		return nil, nil
	})
	if err == nil {
		t.Fatal("Drain did not fail")
	}
	if got := s.Stats().Oldest; !got.Equal(created[1]) {
		t.Fatalf("Oldest after the first segment drained %v; want %v", got, created[1])
	}
}

// TestFilesAreOwnerOnly: the spool holds payloads, in clear for queues without encryption, so
// every file and directory is the broker user's alone, even in a directory made 0755 earlier.
func TestFilesAreOwnerOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	if err := os.MkdirAll(filepath.Join(dir, failedDirName), 0o755); err != nil {
		t.Fatal(err)
	}
	s := openSpool(t, dir, 1024, nil)
	mustAppend(t, s, record(1), record(2))
	if err := s.Seal(); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, record(3)) // an active segment too
	if _, err := s.Drain(context.Background(), 10, func(batch [][]byte) (map[int]string, error) {
		return map[int]string{0: "refused, to fill failed/"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	var files int
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := os.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		} else {
			files++
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", path, info.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 3 { // the lock, the active segment, the failed records
		t.Fatalf("only %d files to check", files)
	}
}
