package spool

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"queen/testkit"
)

// diskStats reads the segment files and says what Stats must report: the files holding
// records, their records and sizes, and the creation time of the oldest.
func diskStats(t *testing.T, dir string) Stats {
	t.Helper()
	files := append(segmentFiles(t, dir, sealedExt), segmentFiles(t, dir, activeExt)...)
	slices.Sort(files) // the sequence numbers have a fixed width: name order is FIFO order
	var st Stats
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		sr := newSegmentReader(f, fi.Size())
		created, err := sr.readHeader()
		var records int64
		for err == nil {
			if _, err = sr.next(); err == nil {
				records++
			}
		}
		f.Close()
		if !errors.Is(err, io.EOF) {
			t.Fatalf("%s: %v", path, err)
		}
		if records == 0 {
			continue // an active segment nothing was written to yet
		}
		if st.Segments == 0 {
			st.Oldest = created
		}
		st.Segments++
		st.Records += records
		st.Bytes += fi.Size()
	}
	return st
}

// checkAgainstDisk compares Stats with the files: segments, records, bytes, oldest and failed.
func checkAgainstDisk(t *testing.T, s *Spool, dir, step string) Stats {
	t.Helper()
	got, want := s.Stats(), diskStats(t, dir)
	if _, err := os.Stat(filepath.Join(dir, failedDirName, failedFileName)); err == nil {
		want.Failed = int64(len(readFailed(t, dir)))
	}
	got.Syncs = 0
	if got != want {
		t.Fatalf("%s: Stats = %+v; the files hold %+v", step, got, want)
	}
	if s.Empty() != (got.Records == 0) {
		t.Fatalf("%s: Empty() = %v with %d records pending", step, s.Empty(), got.Records)
	}
	return got
}

var errDown = errors.New("database down")

// TestStatsMatchTheFiles runs appends, seals, a failing and a refusing drain, refused appends
// (bound and disk full), a crash and the recovery, and after each step compares Stats, kept
// as counters, with what the files hold.
func TestStatsMatchTheFiles(t *testing.T) {
	dir := t.TempDir()
	s := openWith(t, Options{Dir: dir, SegmentBytes: 2048, MaxBytes: 12 << 10}, nil)
	checkAgainstDisk(t, s, dir, "empty")
	var want [][]byte
	appendN := func(n int) {
		for range n {
			r := record(len(want))
			mustAppend(t, s, r)
			want = append(want, r)
		}
	}
	appendN(40)
	checkAgainstDisk(t, s, dir, "appends across segments")
	if err := s.Seal(); err != nil {
		t.Fatal(err)
	}
	checkAgainstDisk(t, s, dir, "seal")
	appendN(10)
	checkAgainstDisk(t, s, dir, "appends after the seal")

	calls := 0
	got := 0
	if _, err := s.Drain(context.Background(), 4, func(batch [][]byte) (map[int]string, error) {
		if calls++; calls == 3 {
			return nil, errDown
		}
		got += len(batch)
		return nil, nil
	}); !errors.Is(err, errDown) {
		t.Fatalf("Drain: %v; want %v", err, errDown)
	}
	checkAgainstDisk(t, s, dir, "a drain that failed in its second segment")

	for {
		if len(want) > 10000 {
			t.Fatal("the bound never refused an append")
		}
		err := s.Append([][]byte{record(len(want))})
		if errors.Is(err, ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, record(len(want)))
	}
	checkAgainstDisk(t, s, dir, "appends up to the bound")

	s.testHookWrite = halfWriteThenENOSPC
	if err := s.Append([][]byte{[]byte(`{"small":1}`)}); !errors.Is(err, ErrFull) {
		t.Fatalf("Append on a full disk: %v; want ErrFull", err)
	}
	s.testHookWrite = nil
	checkAgainstDisk(t, s, dir, "a write that hit a full disk")

	if _, err := s.Drain(context.Background(), 5, func(batch [][]byte) (map[int]string, error) {
		return map[int]string{0: "refused for good"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	checkAgainstDisk(t, s, dir, "a drain that refused records")

	appendN(3)
	crash(t, s)
	s = openWith(t, Options{Dir: dir, SegmentBytes: 2048, MaxBytes: 12 << 10}, nil)
	checkAgainstDisk(t, s, dir, "the recovery after a crash")
	appendN(2)
	if _, err := s.DrainWhenReady(context.Background(), 7, func(context.Context) error { return nil },
		func([][]byte) (map[int]string, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if st := checkAgainstDisk(t, s, dir, "everything drained"); st.Segments != 0 || st.Failed == 0 {
		t.Fatalf("after the last drain Stats = %+v; want nothing pending and the refused records counted", st)
	}
}

// halfWriteThenENOSPC writes half of b and fails as a full disk does.
func halfWriteThenENOSPC(f *os.File, b []byte) (int, error) {
	n, err := f.Write(b[:len(b)/2])
	if err != nil {
		return n, err
	}
	return n, syscall.ENOSPC
}

// TestBoundRefusesAppends fills a small spool to its bound: the refused Append returns
// ErrFull and writes nothing, Stats and the files stay as they were, the refusals are logged
// once rather than once each, and everything appended before is drained intact and in order,
// after which appends are accepted again.
func TestBoundRefusesAppends(t *testing.T) {
	dir := t.TempDir()
	logs := &testkit.LogBuffer{}
	const bound = 8 << 10
	s := openWith(t, Options{Dir: dir, SegmentBytes: 3000, MaxBytes: bound}, logs)

	var want [][]byte
	for {
		if len(want) > 10000 {
			t.Fatal("the bound never refused an append")
		}
		r := record(len(want))
		err := s.Append([][]byte{r})
		if errors.Is(err, ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, r)
	}
	before := s.Stats()
	if before.Records != int64(len(want)) || before.Bytes > bound || before.Segments < 2 {
		t.Fatalf("Stats at the bound = %+v; want %d records in several segments within %d bytes", before, len(want), bound)
	}
	onDisk := diskBytes(t, dir)
	const refusals = 50
	for i := range refusals {
		call := [][]byte{record(i)}
		if i%2 == 1 {
			call = append(call, record(i+1)) // several records: refused as a whole
		}
		if err := s.Append(call); !errors.Is(err, ErrFull) {
			t.Fatalf("Append #%d at the bound: %v; want ErrFull", i, err)
		}
	}
	if after := s.Stats(); after != before {
		t.Fatalf("refused appends changed Stats: %+v; before %+v", after, before)
	}
	if n := diskBytes(t, dir); n != onDisk {
		t.Fatalf("refused appends changed the files: %d bytes; before %d", n, onDisk)
	}
	full := 0
	for _, l := range logs.Lines("level=WARN") {
		if strings.Contains(l, "spool: full") {
			full++
		}
	}
	if full == 0 || full >= refusals {
		t.Fatalf("%d log lines about %d refused appends; want one per interval", full, refusals+1)
	}

	var got [][]byte
	if _, err := s.DrainWhenReady(context.Background(), 10, func(context.Context) error { return nil }, func(batch [][]byte) (map[int]string, error) {
		got = append(got, batch...)
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	equalRecords(t, got, want)
	checkStats(t, s, 0, 0, 0)
	mustAppend(t, s, record(0))
	if !strings.Contains(logs.String(), "spool: appends accepted again") {
		t.Fatalf("the end of the refusals was not logged:\n%s", logs.String())
	}

	// A call that does not fit even into an empty spool creates no file.
	dir = t.TempDir()
	s = openWith(t, Options{Dir: dir, MaxBytes: bound}, nil)
	if err := s.Append([][]byte{make([]byte, bound)}); !errors.Is(err, ErrFull) {
		t.Fatalf("Append larger than the bound: %v; want ErrFull", err)
	}
	if files := append(segmentFiles(t, dir, sealedExt), segmentFiles(t, dir, activeExt)...); len(files) != 0 {
		t.Fatalf("a refused Append left files: %v", files)
	}
}

// TestDiskFullIsErrFull: a write that fails with ENOSPC after part of it landed is cut off the
// segment and answered ErrFull, as the bound is; the spool keeps working once there is room,
// and the next Open finds no torn tail.
func TestDiskFullIsErrFull(t *testing.T) {
	dir := t.TempDir()
	logs := &testkit.LogBuffer{}
	s := openSpool(t, dir, 0, logs)
	mustAppend(t, s, record(0), record(1))
	before, onDisk := s.Stats(), diskBytes(t, dir)

	s.testHookWrite = halfWriteThenENOSPC
	err := s.Append([][]byte{record(2), record(3)})
	if !errors.Is(err, ErrFull) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Append on a full disk: %v; want ErrFull wrapping ENOSPC", err)
	}
	s.testHookWrite = nil
	if after := s.Stats(); after.Records != before.Records || after.Bytes != before.Bytes {
		t.Fatalf("Stats after the failed write = %+v; before %+v", after, before)
	}
	if n := diskBytes(t, dir); n != onDisk {
		t.Fatalf("the failed write left %d bytes in the segment", n-onDisk)
	}
	mustAppend(t, s, record(4))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openSpool(t, dir, 0, logs)
	if w := logs.Lines("level=WARN"); len(w) != 1 || !strings.Contains(w[0], "spool: full") {
		t.Fatalf("warnings: %q; want the one about the full disk, and no torn tail at Open", w)
	}
	equalRecords(t, drainAll(t, s, 10), [][]byte{record(0), record(1), record(4)})
}

// TestSealsOnlyWhenDrainCanProceed: while ready fails, DrainWhenReady neither seals nor reads,
// so an outage keeps appending to one segment; once ready passes it seals and delivers it,
// and a drain that then fails leaves that one sealed segment for the next attempt.
func TestSealsOnlyWhenDrainCanProceed(t *testing.T) {
	dir := t.TempDir()
	s := openSpool(t, dir, 0, nil)
	down := func(context.Context) error { return errDown }
	up := func(context.Context) error { return nil }
	never := func([][]byte) (map[int]string, error) {
		t.Fatal("fn called while ready fails")
		return nil, nil
	}
	var want [][]byte
	attempts := func(n int) {
		t.Helper()
		for range n {
			want = append(want, record(len(want)))
			mustAppend(t, s, want[len(want)-1])
			if n, err := s.DrainWhenReady(context.Background(), 10, down, never); !errors.Is(err, errDown) || n != 0 {
				t.Fatalf("DrainWhenReady while down = %d, %v; want 0, %v", n, err, errDown)
			}
		}
	}
	attempts(20)
	if sealed, active := segmentFiles(t, dir, sealedExt), segmentFiles(t, dir, activeExt); len(sealed) != 0 || len(active) != 1 {
		t.Fatalf("after 20 attempts while down: sealed %v, active %v; want one active segment", sealed, active)
	}
	checkStats(t, s, 1, 20, 0)

	// Reachable, but the first batch fails: the segment is sealed once, and kept.
	if _, err := s.DrainWhenReady(context.Background(), 10, up, func([][]byte) (map[int]string, error) { return nil, errDown }); !errors.Is(err, errDown) {
		t.Fatalf("DrainWhenReady with a failing fn: %v", err)
	}
	attempts(20)
	if sealed, active := segmentFiles(t, dir, sealedExt), segmentFiles(t, dir, activeExt); len(sealed) != 1 || len(active) != 1 {
		t.Fatalf("after a failed drain and 20 attempts while down: sealed %v, active %v; want one of each", sealed, active)
	}

	var got [][]byte
	n, err := s.DrainWhenReady(context.Background(), 7, up, func(batch [][]byte) (map[int]string, error) {
		got = append(got, batch...)
		return nil, nil
	})
	if err != nil || n != len(want) {
		t.Fatalf("DrainWhenReady = %d, %v; want %d, nil", n, err, len(want))
	}
	equalRecords(t, got, want)
	checkStats(t, s, 0, 0, 0)
	if files := append(segmentFiles(t, dir, sealedExt), segmentFiles(t, dir, activeExt)...); len(files) != 0 {
		t.Fatalf("segments left after the drain: %v", files)
	}
}

// TestFullSegmentsSealWhileDown: the size rule still applies while the drain cannot proceed,
// so a long outage leaves segments of SegmentBytes, not one file growing without end.
func TestFullSegmentsSealWhileDown(t *testing.T) {
	dir := t.TempDir()
	s := openSpool(t, dir, 1024, nil)
	for i := range 100 {
		mustAppend(t, s, record(i))
		if _, err := s.DrainWhenReady(context.Background(), 10, func(context.Context) error { return errDown }, nil); !errors.Is(err, errDown) {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	sealed := segmentFiles(t, dir, sealedExt)
	if len(sealed) < 2 || len(sealed) != st.Segments-1 {
		t.Fatalf("%d sealed files, Stats %+v; want the 1 KiB segments sealed as they filled", len(sealed), st)
	}
	for _, p := range sealed {
		if fi, err := os.Stat(p); err != nil || fi.Size() < 1024 {
			t.Fatalf("sealed segment %s is not full: %v %v", p, fi.Size(), err)
		}
	}
}
