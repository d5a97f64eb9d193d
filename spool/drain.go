package spool

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Drain replays sealed segments oldest first; it never reads the active segment (call Seal first
// to include it). For each segment it calls fn with the segment's records in batches of at most
// maxBatch, in order; fn may keep the batch and the records. fn returns (refused, err):
//
//   - err != nil: transient (database down). Drain stops and returns err; this segment and every
//     later one stay untouched for the next Drain, which delivers this segment from its start.
//   - refused: indexes (into the batch) of records refused for good, with the reason. Each is
//     written to failed/ with one Warn log line and counted in Stats.Failed; draining continues.
//
// A segment is deleted only after fn succeeded for all its batches. A crash in the middle of a
// segment replays that segment from its start next time. A segment found corrupt is delivered up
// to the damage, which is logged with one Warn line. Drain also stops when ctx is done.
//
// Drain returns how many records it delivered: records of the batches fn accepted, minus the
// refused ones. Records of a segment that is delivered again by a later Drain count again.
func (s *Spool) Drain(ctx context.Context, maxBatch int, fn func(batch [][]byte) (refused map[int]string, err error)) (int, error) {
	if maxBatch <= 0 {
		return 0, fmt.Errorf("cannot drain spool %s: maxBatch must be positive; got %d", s.dir, maxBatch)
	}
	s.drainMu.Lock()
	defer s.drainMu.Unlock()
	delivered := 0
	for {
		if err := ctx.Err(); err != nil {
			return delivered, err
		}
		s.mu.Lock()
		closed := s.closed
		var seg *segment
		if len(s.sealed) > 0 {
			seg = s.sealed[0]
		}
		s.mu.Unlock()
		if closed {
			return delivered, ErrClosed
		}
		if seg == nil {
			return delivered, nil
		}
		n, err := s.drainSegment(ctx, seg, maxBatch, fn)
		delivered += n
		if err != nil {
			return delivered, err
		}
	}
}

// DrainWhenReady delivers every pending record, the active segment's included, but only once
// ready says the consumer can take them: the active segment is sealed only then. While ready
// fails nothing is sealed or read and its error is returned, so that appends during a long
// outage fill the active segment up to SegmentBytes instead of leaving one small segment per
// attempt. fn and the return values are as for Drain; a seal failure is returned without a
// drain, as the spool then refuses appends until it is reopened.
//
// With Options.PaceWait, appends are paced from the moment ready succeeds until a call finds the
// spool empty, or ready or fn fails (the drain cannot go on, and appends must not wait for it).
// When what is left after a round is within paceSlack, appends are held for one more round;
// if it empties the spool they are released with ErrDrained (see pacer).
func (s *Spool) DrainWhenReady(ctx context.Context, maxBatch int, ready func(context.Context) error, fn func(batch [][]byte) (refused map[int]string, err error)) (int, error) {
	if err := ready(ctx); err != nil {
		s.pace.stop(false)
		return 0, err
	}
	s.pace.start()
	round := func() (int, error) {
		if err := s.Seal(); err != nil {
			return 0, fmt.Errorf("cannot seal the active segment of spool %s: %w", s.dir, err)
		}
		return s.Drain(ctx, maxBatch, func(batch [][]byte) (map[int]string, error) {
			refused, err := fn(batch)
			if err == nil {
				s.pace.replayed(len(batch))
			}
			return refused, err
		})
	}
	n, err := round()
	if left := s.pending.Load(); err == nil && left > 0 && left <= paceSlack {
		s.pace.close()
		var k int
		k, err = round()
		n += k
	}
	if err != nil || s.Empty() {
		s.pace.stop(err == nil)
	}
	return n, err
}

type refusedRecord struct {
	index  int64
	reason string
	record []byte
}

// drainSegment delivers one sealed segment and deletes it.
func (s *Spool) drainSegment(ctx context.Context, seg *segment, maxBatch int, fn func([][]byte) (map[int]string, error)) (int, error) {
	path := s.segmentPath(seg.seq, sealedExt)
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("cannot open segment for drain: %w", err)
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("cannot stat segment %s: %w", path, err)
	}
	sr := newSegmentReader(f, fi.Size())
	_, rerr := sr.readHeader()

	delivered := 0
	var index int64 // of the first record of the batch in the segment
	var refused []refusedRecord
	for rerr == nil {
		batch := make([][]byte, 0, min(maxBatch, 1024))
		for len(batch) < maxBatch {
			var rec []byte
			if rec, rerr = sr.next(); rerr != nil {
				break
			}
			batch = append(batch, rec)
		}
		if rerr != nil && !errors.Is(rerr, io.EOF) && !errors.Is(rerr, errCorrupt) {
			return delivered, fmt.Errorf("cannot read segment %s: %w", path, rerr)
		}
		if len(batch) == 0 {
			break
		}
		if err := ctx.Err(); err != nil {
			return delivered, err
		}
		bad, err := fn(batch)
		if err != nil {
			return delivered, err
		}
		n := 0
		for i, reason := range bad {
			if i < 0 || i >= len(batch) {
				s.log.Warn("spool: drain callback refused an index outside its batch; ignored",
					"file", path, "index", i, "batch", len(batch))
				continue
			}
			refused = append(refused, refusedRecord{index: index + int64(i), reason: reason, record: batch[i]})
			n++
		}
		delivered += len(batch) - n
		index += int64(len(batch))
	}
	if errors.Is(rerr, errCorrupt) {
		s.log.Warn("spool: dropped a corrupt segment tail while draining",
			"file", path, "dropped_bytes", sr.size-sr.off, "delivered_records", index, "reason", rerr.Error())
	}
	if len(refused) > 0 {
		if err := s.writeFailed(filepath.Base(path), refused); err != nil {
			return delivered, err
		}
	}
	if err := f.Close(); err != nil {
		return delivered, fmt.Errorf("cannot close segment %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		return delivered, fmt.Errorf("cannot delete drained segment: %w", err)
	}
	if err := syncDir(s.dir); err != nil {
		return delivered, err
	}
	s.mu.Lock()
	s.removeSealedLocked(seg)
	s.failed += int64(len(refused))
	s.mu.Unlock()
	return delivered, nil
}

// failedLine is one line of failed/records.jsonl.
type failedLine struct {
	Time         time.Time       `json:"time"`
	Segment      string          `json:"segment"`
	Index        int64           `json:"index"`
	Reason       string          `json:"reason"`
	Record       json.RawMessage `json:"record,omitempty"`
	RecordBase64 []byte          `json:"recordBase64,omitempty"`
}

// writeFailed appends the refused records of a segment to failed/records.jsonl and fsyncs it.
func (s *Spool) writeFailed(segName string, refused []refusedRecord) error {
	slices.SortFunc(refused, func(a, b refusedRecord) int { return cmp.Compare(a.index, b.index) })
	now := time.Now().UTC()
	var buf bytes.Buffer
	for _, r := range refused {
		line := failedLine{Time: now, Segment: segName, Index: r.index, Reason: r.reason}
		if json.Valid(r.record) {
			line.Record = r.record
		} else {
			line.RecordBase64 = r.record
		}
		b, err := json.Marshal(line)
		if err != nil {
			return fmt.Errorf("cannot encode refused record %d of %s: %w", r.index, segName, err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	dir := filepath.Join(s.dir, failedDirName)
	path := filepath.Join(dir, failedFileName)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, fileMode)
	if err != nil {
		return fmt.Errorf("cannot open failed records file: %w", err)
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		_ = f.Close()
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("cannot fsync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("cannot close %s: %w", path, err)
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	for _, r := range refused {
		s.log.Warn("spool: record refused for good; moved to failed/",
			"segment", segName, "index", r.index, "reason", r.reason, "file", path)
	}
	return nil
}

// recoverFailed counts the lines of failed/records.jsonl and cuts off a torn last line (the
// segment it came from was not deleted, so it is refused and written again).
func (s *Spool) recoverFailed() (int64, error) {
	path := filepath.Join(s.dir, failedDirName, failedFileName)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("cannot open failed records file: %w", err)
	}
	defer func() { _ = f.Close() }()
	var lines, off, end int64 // end: just past the last newline
	buf := make([]byte, 64*1024)
	for {
		n, err := f.Read(buf)
		for i, c := range buf[:n] {
			if c == '\n' {
				lines++
				end = off + int64(i) + 1
			}
		}
		off += int64(n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("cannot read %s: %w", path, err)
		}
	}
	if off > end {
		s.log.Warn("spool: dropped a torn line of the failed records file", "file", path, "dropped_bytes", off-end)
		if err := f.Truncate(end); err != nil {
			return 0, fmt.Errorf("cannot truncate %s: %w", path, err)
		}
		if err := f.Sync(); err != nil {
			return 0, fmt.Errorf("cannot fsync %s: %w", path, err)
		}
	}
	return lines, nil
}
