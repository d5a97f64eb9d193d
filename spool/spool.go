package spool

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultSegmentBytes is the segment size used when Options.SegmentBytes is zero.
const DefaultSegmentBytes = 16 << 20

// ErrClosed is returned by calls on a closed Spool.
var ErrClosed = errors.New("spool is closed")

// ErrFull is returned (wrapped) by an Append that was refused for lack of room: it would have
// taken the pending segments past Options.MaxBytes, or the disk is full (ENOSPC). Nothing of the
// refused call is stored, nothing stored before is touched, and a later Append may succeed once
// Drain has freed room.
var ErrFull = errors.New("spool is full")

// ErrDrained is returned by an Append held while a drain emptied the spool (see pacer): nothing
// was appended, and the records can now go straight to the consumer without overtaking any.
var ErrDrained = errors.New("spool drained while the append waited")

// fullLogEvery spaces the log lines about refused appends: under load a full spool refuses
// thousands of calls a second, and one line per interval with their count says the same.
const fullLogEvery = 10 * time.Second

const (
	activeExt = ".active"
	sealedExt = ".seg"
	seqDigits = 20

	failedDirName  = "failed"
	failedFileName = "records.jsonl"
	lockFileName   = "flock.lock"
)

// Options configure a Spool.
type Options struct {
	Dir          string // segments live here; failed/ holds refused records
	SegmentBytes int64  // seal the active segment when it grows past this (default 16 MiB)
	MaxBytes     int64  // refuse (ErrFull) an Append that would take the segments past this; 0: no bound
	// PaceWait, when not 0, keeps a drain ahead of new appends: while DrainWhenReady runs an
	// Append waits, at most this long, for the drain to have replayed twice what was appended
	// since it began (see pacer).
	PaceWait time.Duration
	Log      *slog.Logger // nil discards
}

// Stats describe what is pending in a Spool. Segments, Records and Bytes include the active
// segment.
type Stats struct {
	Segments int       // segment files waiting for Drain, including a non-empty active one
	Records  int64     // records in them
	Bytes    int64     // their size on disk
	Oldest   time.Time // when the oldest pending record was appended; zero when none
	Failed   int64     // records in failed/ (counted at Open, then added by Drain)
	Syncs    int64     // fsyncs of segment data since Open
	// PacedAppends are the appends that waited for a drain (Options.PaceWait) since Open, and
	// PacedWait their waits, summed.
	PacedAppends int64
	PacedWait    time.Duration
}

// Spool is a durable on-disk FIFO of records. All methods are safe for concurrent use; Drain
// calls run one at a time.
type Spool struct {
	dir          string
	segmentBytes int64
	maxBytes     int64
	log          *slog.Logger
	lock         *os.File

	drainMu sync.Mutex // one Drain at a time; taken before mu
	pace    *pacer

	mu      sync.Mutex
	cond    *sync.Cond // signalled when syncing or synced change
	closed  bool
	err     error      // sticky: set when an fsync or a seal fails; Append and Seal return it
	sealed  []*segment // oldest first
	active  *activeSegment
	nextSeq uint64
	written uint64 // number of writes into segments so far
	synced  uint64 // writes up to this one are durable
	syncing bool   // a goroutine is fsyncing the active segment without holding mu
	failed  int64
	// Totals of the sealed segments, kept on seal, drain and Open so that Stats and the size
	// bound cost the same with ten segments or ten thousand.
	sealedRecords int64
	sealedBytes   int64
	// Refused appends not logged yet, and when the last line about them was logged; full says
	// appends are being refused (reset by the next one that succeeds).
	full        bool
	fullRefused int64
	fullLogged  time.Time

	syncs atomic.Int64

	// pending counts the records appended and not drained, for Empty: Stats().Records, plus
	// those of a segment a failed seal left for the next Open (pushes must stay behind them).
	pending atomic.Int64

	// Test hooks, set before the Spool is used concurrently.
	testHookBeforeSync func()
	testHookAfterWrite func()
	testHookWrite      func(f *os.File, b []byte) (int, error) // replaces f.Write of records
}

type segment struct {
	seq     uint64
	created time.Time
	records int64
	bytes   int64
}

type activeSegment struct {
	segment
	f *os.File
}

// The spool holds payloads before they reach PostgreSQL (in clear for queues without
// encryption): only the broker's own user may read it, wherever FILE_BUFFER_DIR points.
const (
	fileMode os.FileMode = 0o600
	dirMode  os.FileMode = 0o700
)

// Open creates Dir if needed and recovers what a crash left: the active segment of a previous
// process is checked record by record; a torn or corrupt tail (short length, short body, CRC
// mismatch) is truncated away with one Warn log line saying how many bytes were dropped, and the
// segment is sealed. Sealed segments are checked the same way. Never replay garbage.
//
// Open holds an flock on Dir until Close, so a second Spool on the same Dir fails to open.
func Open(o Options) (*Spool, error) {
	if o.Dir == "" {
		return nil, errors.New("cannot open spool: Options.Dir is empty")
	}
	if o.SegmentBytes < 0 || o.MaxBytes < 0 {
		return nil, fmt.Errorf("cannot open spool %s: negative SegmentBytes %d or MaxBytes %d", o.Dir, o.SegmentBytes, o.MaxBytes)
	}
	if o.SegmentBytes == 0 {
		o.SegmentBytes = DefaultSegmentBytes
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Join(o.Dir, failedDirName), dirMode); err != nil {
		return nil, fmt.Errorf("cannot create spool directory: %w", err)
	}
	// MkdirAll leaves existing directories as they are: a spool created by an older version,
	// or a directory the operator made, is closed to other users here.
	for _, d := range []string{o.Dir, filepath.Join(o.Dir, failedDirName)} {
		if err := os.Chmod(d, dirMode); err != nil {
			return nil, fmt.Errorf("cannot restrict spool directory %s to its owner: %w", d, err)
		}
	}
	lock, err := lockDir(filepath.Join(o.Dir, lockFileName))
	if err != nil {
		return nil, fmt.Errorf("cannot open spool %s: %w", o.Dir, err)
	}
	s := &Spool{
		dir:          o.Dir,
		segmentBytes: o.SegmentBytes,
		maxBytes:     o.MaxBytes,
		pace:         newPacer(o.PaceWait),
		log:          o.Log,
		lock:         lock,
		nextSeq:      1,
	}
	s.cond = sync.NewCond(&s.mu)
	if err := s.recover(); err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("cannot open spool %s: %w", o.Dir, err)
	}
	return s, nil
}

// recover checks the segments left in the directory, truncates their bad tails, seals the
// active segment and counts the failed records.
func (s *Spool) recover() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("cannot list directory: %w", err)
	}
	type found struct {
		seq    uint64
		active bool
	}
	var files []found
	for _, e := range entries {
		seq, ext, ok := parseName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		files = append(files, found{seq: seq, active: ext == activeExt})
		s.nextSeq = max(s.nextSeq, seq+1)
	}
	slices.SortFunc(files, func(a, b found) int { return cmp.Compare(a.seq, b.seq) })
	dirty := false
	for _, fl := range files {
		ext := sealedExt
		if fl.active {
			ext = activeExt
		}
		path := s.segmentPath(fl.seq, ext)
		seg, changed, err := s.checkSegment(path, fl.seq)
		if err != nil {
			return err
		}
		dirty = dirty || changed
		if seg == nil {
			continue
		}
		if fl.active {
			if err := os.Rename(path, s.segmentPath(fl.seq, sealedExt)); err != nil {
				return fmt.Errorf("cannot seal recovered segment: %w", err)
			}
			dirty = true
			s.log.Info("spool: sealed the active segment of a previous process",
				"file", path, "records", seg.records)
		}
		s.addSealedLocked(seg)
	}
	s.pending.Store(s.sealedRecords)
	if dirty {
		if err := syncDir(s.dir); err != nil {
			return err
		}
	}
	n, err := s.recoverFailed()
	if err != nil {
		return err
	}
	s.failed = n
	return nil
}

// checkSegment reads the segment at path record by record. A bad tail is truncated away with a
// Warn line; a segment without records is deleted and nil is returned. changed reports whether
// the directory changed.
func (s *Spool) checkSegment(path string, seq uint64) (seg *segment, changed bool, err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, false, fmt.Errorf("cannot open segment: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("cannot close segment %s: %w", path, cerr)
		}
	}()
	fi, err := f.Stat()
	if err != nil {
		return nil, false, fmt.Errorf("cannot stat segment: %w", err)
	}
	size := fi.Size()
	sr := newSegmentReader(f, size)
	seg = &segment{seq: seq}
	var bad error
	seg.created, bad = sr.readHeader()
	for bad == nil {
		if _, bad = sr.next(); bad == nil {
			seg.records++
		}
	}
	if !errors.Is(bad, io.EOF) && !errors.Is(bad, errCorrupt) {
		return nil, false, fmt.Errorf("cannot read segment %s: %w", path, bad)
	}
	good := sr.off
	if errors.Is(bad, errCorrupt) && size > good {
		s.log.Warn("spool: dropped a torn or corrupt segment tail",
			"file", path, "dropped_bytes", size-good, "kept_records", seg.records, "reason", bad.Error())
		if seg.records > 0 {
			if err := f.Truncate(good); err != nil {
				return nil, false, fmt.Errorf("cannot truncate segment %s: %w", path, err)
			}
			if err := f.Sync(); err != nil {
				return nil, false, fmt.Errorf("cannot fsync segment %s: %w", path, err)
			}
		}
	}
	if seg.records == 0 {
		if err := os.Remove(path); err != nil {
			return nil, false, fmt.Errorf("cannot remove empty segment: %w", err)
		}
		return nil, true, nil
	}
	seg.bytes = good
	return seg, false, nil
}

// Append writes records durably: it returns only after the bytes are fsynced. Concurrent Append
// calls share fsyncs (group commit: one goroutine syncs for everyone waiting). Records of one
// call stay contiguous, in order and in one segment. Records must be 1..MaxRecordBytes bytes.
//
// A call that would take the pending segments past Options.MaxBytes, or that finds the disk full,
// returns an error wrapping ErrFull and stores none of its records.
func (s *Spool) Append(records [][]byte) error {
	if len(records) == 0 {
		return nil
	}
	n := 0
	for i, r := range records {
		if len(r) == 0 {
			return fmt.Errorf("cannot append record #%d: empty records are not allowed", i)
		}
		if len(r) > MaxRecordBytes {
			return fmt.Errorf("cannot append record #%d: %d bytes exceeds the %d byte limit", i, len(r), MaxRecordBytes)
		}
		n += frameHeaderSize + len(r)
	}
	buf := make([]byte, 0, n)
	for _, r := range records {
		buf = appendRecord(buf, r)
	}
	if err := s.pace.admit(len(records)); err != nil {
		return err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.err != nil {
		return s.err
	}
	if err := s.writeLocked(buf, len(records)); err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			err = fmt.Errorf("%w: %w", ErrFull, err)
		}
		if errors.Is(err, ErrFull) {
			s.refusedLocked(len(records), err)
		}
		return err
	}
	if s.full {
		s.log.Info("spool: appends accepted again", "refused_records", s.fullRefused)
		s.full, s.fullRefused, s.fullLogged = false, 0, time.Time{}
	}
	my := s.written
	if s.testHookAfterWrite != nil {
		s.testHookAfterWrite()
	}
	if s.active.bytes >= s.segmentBytes {
		// The seal fsyncs the segment, which makes this write durable. A failure is sticky and
		// returned by waitSyncedLocked unless the write was already synced.
		_ = s.sealActiveLocked(s.active)
	}
	return s.waitSyncedLocked(my)
}

// writeLocked checks the size bound, then writes buf (count records) to the active segment,
// creating it first if needed. On error nothing of buf is left in the segment.
func (s *Spool) writeLocked(buf []byte, count int) error {
	need := int64(len(buf))
	onDisk := s.sealedBytes
	if s.active != nil {
		onDisk += s.active.bytes
	} else {
		need += headerSize
	}
	if s.maxBytes > 0 && onDisk+need > s.maxBytes {
		return fmt.Errorf("%w: %d more bytes would take the pending segments (%d bytes) past the %d byte bound",
			ErrFull, need, onDisk, s.maxBytes)
	}
	if s.active == nil {
		if err := s.createActiveLocked(); err != nil {
			return err
		}
	}
	a := s.active
	write := a.f.Write
	if s.testHookWrite != nil {
		write = func(b []byte) (int, error) { return s.testHookWrite(a.f, b) }
	}
	if _, err := write(buf); err != nil {
		// Cut off what part of the write landed, so the segment stays well-formed.
		if terr := a.f.Truncate(a.bytes); terr != nil {
			s.failLocked(fmt.Errorf("cannot truncate %s after a failed write: %w", a.f.Name(), terr))
		}
		return fmt.Errorf("cannot write %d records to %s: %w", count, a.f.Name(), err)
	}
	a.bytes += int64(len(buf))
	a.records += int64(count)
	s.pending.Add(int64(count))
	s.written++
	return nil
}

// refusedLocked logs appends refused for lack of room: the first at once, then at most one line
// per fullLogEvery with the number refused since the previous line.
func (s *Spool) refusedLocked(records int, err error) {
	s.full = true
	s.fullRefused += int64(records)
	if now := time.Now(); s.fullLogged.IsZero() || now.Sub(s.fullLogged) >= fullLogEvery {
		s.log.Warn("spool: full; appends are refused until the drain frees room",
			"refused_records", s.fullRefused, "dir", s.dir, "err", err)
		s.fullRefused, s.fullLogged = 0, now
	}
}

// waitSyncedLocked returns once the write numbered my is durable. Whoever finds no fsync in
// flight starts one covering every write made so far; the others wait for it.
func (s *Spool) waitSyncedLocked(my uint64) error {
	for s.synced < my {
		if s.err != nil {
			return s.err
		}
		if s.syncing {
			s.cond.Wait()
			continue
		}
		if s.active == nil {
			return errors.New("BUG: unsynced write without an active segment")
		}
		s.syncing = true
		target := s.written
		f := s.active.f
		s.mu.Unlock()
		if s.testHookBeforeSync != nil {
			s.testHookBeforeSync()
		}
		err := f.Sync()
		s.syncs.Add(1)
		s.mu.Lock()
		s.syncing = false
		if err != nil {
			s.failLocked(fmt.Errorf("cannot fsync %s: %w", f.Name(), err))
		} else {
			s.synced = max(s.synced, target)
		}
		s.cond.Broadcast()
	}
	return nil
}

// createActiveLocked creates a new active segment with its header.
func (s *Spool) createActiveLocked() error {
	seq := s.nextSeq
	s.nextSeq++
	path := s.segmentPath(seq, activeExt)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, fileMode)
	if err != nil {
		return fmt.Errorf("cannot create segment: %w", err)
	}
	created := time.Unix(0, time.Now().UnixNano())
	if _, err := f.Write(appendHeader(nil, created)); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return fmt.Errorf("cannot write segment header to %s: %w", path, err)
	}
	if err := syncDir(s.dir); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return err
	}
	s.active = &activeSegment{segment: segment{seq: seq, created: created, bytes: headerSize}, f: f}
	return nil
}

// Seal closes the active segment (atomic rename from .active to .seg) so Drain can see it. It is
// a cheap no-op when the active segment is empty.
func (s *Spool) Seal() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.err != nil {
		return s.err
	}
	if s.active == nil || s.active.records == 0 {
		return nil
	}
	return s.sealActiveLocked(s.active)
}

// sealActiveLocked fsyncs a, closes it, renames it to its sealed name and fsyncs the directory.
// It does nothing when a is no longer the active segment (another goroutine sealed it).
func (s *Spool) sealActiveLocked(a *activeSegment) error {
	for s.syncing {
		s.cond.Wait()
	}
	if s.active != a {
		return nil
	}
	if s.err != nil {
		return s.err
	}
	err := a.f.Sync()
	s.syncs.Add(1)
	if err != nil {
		return s.failLocked(fmt.Errorf("cannot fsync %s: %w", a.f.Name(), err))
	}
	s.synced = s.written
	s.cond.Broadcast()
	// From here on the records are durable: a failure below leaves a .active file that the next
	// Open recovers.
	s.active = nil
	if err := a.f.Close(); err != nil {
		return s.failLocked(fmt.Errorf("cannot close %s: %w", a.f.Name(), err))
	}
	if err := os.Rename(a.f.Name(), s.segmentPath(a.seq, sealedExt)); err != nil {
		return s.failLocked(fmt.Errorf("cannot seal segment: %w", err))
	}
	if err := syncDir(s.dir); err != nil {
		return s.failLocked(err)
	}
	seg := a.segment
	s.addSealedLocked(&seg)
	return nil
}

// addSealedLocked queues a sealed segment for Drain.
func (s *Spool) addSealedLocked(seg *segment) {
	s.sealed = append(s.sealed, seg)
	s.sealedRecords += seg.records
	s.sealedBytes += seg.bytes
}

// removeSealedLocked forgets a drained segment.
func (s *Spool) removeSealedLocked(seg *segment) {
	i := slices.Index(s.sealed, seg)
	if i < 0 {
		return
	}
	s.sealed = slices.Delete(s.sealed, i, i+1)
	s.sealedRecords -= seg.records
	s.sealedBytes -= seg.bytes
	s.pending.Add(-seg.records)
}

// failLocked makes err sticky: the on-disk state of the active segment is unknown after a failed
// fsync, so Append and Seal refuse to continue. Drain keeps working; a new Open recovers.
func (s *Spool) failLocked(err error) error {
	if s.err == nil {
		s.err = err
		s.log.Error("spool: appends stop until the spool is reopened", "dir", s.dir, "err", err)
	}
	s.cond.Broadcast()
	return err
}

// Stats returns what is pending. It costs the same whatever the number of segments: the totals
// are kept as segments are appended to, sealed, drained and recovered.
func (s *Spool) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Segments: len(s.sealed), Records: s.sealedRecords, Bytes: s.sealedBytes, Failed: s.failed, Syncs: s.syncs.Load()}
	st.PacedAppends, st.PacedWait = s.pace.stats()
	if len(s.sealed) > 0 {
		st.Oldest = s.sealed[0].created
	}
	if a := s.active; a != nil && a.records > 0 {
		if st.Segments == 0 {
			st.Oldest = a.created
		}
		st.Segments++
		st.Records += a.records
		st.Bytes += a.bytes
	}
	return st
}

// Empty reports whether no record is pending (Stats().Records == 0) without taking the lock
// Append writes under: every push asks it.
func (s *Spool) Empty() bool { return s.pending.Load() == 0 }

// Close seals the active segment and closes the Spool. A Drain in progress finishes on its own.
func (s *Spool) Close() error {
	s.pace.stop(false) // appends waiting for a drain find the spool closed
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var err error
	if a := s.active; a != nil {
		if a.records > 0 {
			err = s.sealActiveLocked(a)
		}
		if s.active == a {
			// Empty, or the seal failed before closing it.
			if cerr := a.f.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("cannot close %s: %w", a.f.Name(), cerr)
			}
			if a.records == 0 {
				if rerr := os.Remove(a.f.Name()); rerr != nil && err == nil {
					err = fmt.Errorf("cannot remove empty segment: %w", rerr)
				}
			}
			s.active = nil
		}
	}
	s.cond.Broadcast()
	if cerr := s.lock.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("cannot release the spool lock: %w", cerr)
	}
	return err
}

func (s *Spool) segmentPath(seq uint64, ext string) string {
	return filepath.Join(s.dir, fmt.Sprintf("%0*d%s", seqDigits, seq, ext))
}

// parseName parses NNNNNNNNNNNNNNNNNNNN.active and NNNNNNNNNNNNNNNNNNNN.seg.
func parseName(name string) (seq uint64, ext string, ok bool) {
	switch {
	case strings.HasSuffix(name, activeExt):
		ext = activeExt
	case strings.HasSuffix(name, sealedExt):
		ext = sealedExt
	default:
		return 0, "", false
	}
	digits := strings.TrimSuffix(name, ext)
	if len(digits) != seqDigits {
		return 0, "", false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, "", false
		}
	}
	seq, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, "", false
	}
	return seq, ext, true
}

// syncDir fsyncs a directory so that creates, renames and deletes in it are durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("cannot open directory for fsync: %w", err)
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return fmt.Errorf("cannot fsync directory %s: %w", dir, err)
	}
	if err := d.Close(); err != nil {
		return fmt.Errorf("cannot close directory %s: %w", dir, err)
	}
	return nil
}
