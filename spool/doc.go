// Package spool is a durable on-disk FIFO of opaque records: the push spool of the broker.
//
// Records are appended to an active segment file and fsynced before Append returns; concurrent
// Append calls share fsyncs (group commit). A segment that grows past Options.SegmentBytes, or
// that Seal or Close is called on, is sealed: fsynced and renamed atomically. Drain replays the
// sealed segments oldest first and deletes each one only after the callback accepted all of its
// records. Records the callback refuses for good are moved to failed/. DrainWhenReady seals the
// active segment and drains everything, but only once its caller says the consumer is there:
// during an outage the active segment fills up to SegmentBytes instead of being sealed small.
//
// # Size bound
//
// With Options.MaxBytes set, an Append that would take the pending segments (headers included)
// past it is refused whole with ErrFull before anything is written; so is one that finds the
// disk full (ENOSPC), whose partial write is cut off the segment. Nothing already appended is
// ever dropped to make room: room comes back as Drain deletes segments. Refusals are logged at
// most once per 10 s with their count, and once more when appends are accepted again.
//
// # Directory layout
//
//	Dir/NNNNNNNNNNNNNNNNNNNN.active  the segment being appended to (at most one)
//	Dir/NNNNNNNNNNNNNNNNNNNN.seg     sealed segments, waiting for Drain
//	Dir/failed/records.jsonl         records refused for good (append-only, one JSON object a line)
//	Dir/flock.lock                   held with flock(2) while a Spool is open
//
// NNNNNNNNNNNNNNNNNNNN is a 20-digit decimal sequence number that increases with every new
// segment, so the lexical order of the names is the FIFO order. A segment is created as .active
// and renamed to .seg after an fsync; the directory is fsynced after every create, rename and
// delete.
//
// # Segment format
//
// A segment starts with a 16-byte header followed by records; all integers are little-endian:
//
//	header: "QSPOOL01" (8 bytes) | u64 creation time, Unix nanoseconds
//	record: u32 body length | u32 CRC-32C (Castagnoli) of the body | body
//
// The creation time is the time of the first Append into the segment, which makes it the append
// time of the segment's oldest record (Stats.Oldest). A body is 1..MaxRecordBytes bytes: empty
// records are refused by Append, so that a zero-filled tail left by a crash never decodes as
// records. When reading, a short header, a short length, a zero or oversized length, a short
// body or a CRC mismatch marks the end of the good data: everything from there to the end of the
// segment is dropped and logged with one Warn line (truncated at Open, skipped by Drain).
// Garbage is never replayed.
//
// # failed/records.jsonl
//
// One line per refused record:
//
//	{"time":"…","segment":"…seg","index":N,"reason":"…","record":{…}}
//
// "index" is the position of the record in its segment. "record" holds the record itself when it
// is valid JSON (whitespace may be compacted); otherwise "recordBase64" holds it base64-encoded.
// The lines are fsynced before the segment is deleted; a crash between the two replays the
// segment, and the record may then be listed twice.
//
// # Crash recovery
//
// Open checks every segment record by record. The active segment of a previous process is
// truncated after its last good record and sealed; a sealed segment with a corrupt record is
// truncated the same way; a segment left without records is deleted. Each truncation is one Warn
// log line with the number of bytes dropped.
package spool
