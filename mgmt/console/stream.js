'use strict';
// Streams (x-queue-type stream) on the queue page: what the API's
// railmq_stream object says of the log (offsets, segments, size on disk,
// timestamps) and each consumer's offset and lag. Loaded before
// console.js, which calls these while it draws; they use its helpers
// (h, fmtNum, fmtBytes) only when called.

function isStream(q) { return !!q && q.type === 'stream'; }

// fmtMs is a unix time in milliseconds, UTC to the millisecond; 0 is none.
function fmtMs(ms) {
  if (!ms) return '—';
  return new Date(ms).toISOString().replace('T', ' ').replace('Z', ' UTC');
}

// streamDetails are the rows [label, value] a stream adds to the queue's
// details table.
function streamDetails(q) {
  const s = q.railmq_stream || {};
  return [
    ['First offset', fmtNum(s.first_offset)],
    ['Last offset', s.last_offset === null || s.last_offset === undefined ? '—' : fmtNum(s.last_offset)],
    ['Next offset', fmtNum(s.next_offset)],
    ['Segments', fmtNum(s.segments)],
    ['Size on disk', fmtBytes(s.disk_bytes)],
    ['First message at', fmtMs(s.first_timestamp)],
    ['Last message at', fmtMs(s.last_timestamp)],
    ['Segments deleted', fmtNum(s.segments_deleted)],
  ];
}

// streamConsumerColumns are the consumers table's columns for a stream.
function streamConsumerColumns() {
  return [
    { key: 'offset', label: 'Offset', num: true, cell: c => fmtNum(c.offset) },
    { key: 'offset_lag', label: 'Lag', num: true, cell: c => fmtNum(c.offset_lag) },
    { key: 'railmq_offset_tracking', label: 'Tracking', get: c => c.railmq_offset_tracking || '' },
  ];
}
