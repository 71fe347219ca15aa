package stream

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
)

// A chunk is the unit of a group commit: a header, a Bloom filter of its
// records' filter values and its records, checksummed together (CRC32C,
// Castagnoli), as osiris chunks are. All integers are big-endian.
//
// Header (chunkHeaderSize bytes):
//
//	0  magic        u16 0x5253 ("RS")
//	2  version      u8  1
//	3  chunk type   u8  0: user records
//	4  flags        u8  bit 0: some record has no filter value;
//	                    bit 1: sealed (crypt.go)
//	5  filter size  u8  bytes of Bloom filter after the header (0: none)
//	6  reserved     u16
//	8  records      u32 count (>= 1)
//	12 data size    u32 bytes of records after the filter
//	16 first offset u64
//	24 first time   i64 unix ms of the first record
//	32 tag          u64 Raft index (AppendTagged), 0 otherwise
//	40 crc          u32 CRC32C of header (this field zero), filter, records
//	44 reserved     u32
//
// Record (recordHeaderSize bytes, then the filter value, then the data):
//
//	0  data length  u32
//	4  timestamp    i64 unix ms (per record: timestamp offsets at ms precision)
//	12 filter len   u16
const (
	chunkMagic       = 0x5253
	chunkVersion     = 1
	chunkTypeUser    = 0
	chunkHeaderSize  = 48
	recordHeaderSize = 14
	flagUnfiltered   = 1
	flagSealed       = 2 // filter and records encrypted (crypt.go)

	// maxChunkData is where a batch is cut into a further chunk (a lone
	// larger record still gets a chunk of its own).
	maxChunkData = 4 << 20
	// maxFilterValue is the longest filter value kept (u16 length).
	maxFilterValue = math.MaxUint16
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// chunkHeader is a decoded chunk header.
type chunkHeader struct {
	typ        uint8
	flags      uint8
	filterSize uint8
	count      uint32
	dataSize   uint32
	first      uint64
	firstTs    int64
	tag        uint64
	crc        uint32
}

// size is the chunk's whole length on disk.
func (h *chunkHeader) size() int64 {
	return chunkHeaderSize + int64(h.filterSize) + int64(h.dataSize)
}

func (h *chunkHeader) next() uint64 { return h.first + uint64(h.count) }

// parseHeader decodes and sanity-checks a header (not the CRC: that
// needs the body).
func parseHeader(b []byte) (chunkHeader, error) {
	if len(b) < chunkHeaderSize {
		return chunkHeader{}, fmt.Errorf("%w: short header", ErrCorrupt)
	}
	if binary.BigEndian.Uint16(b[0:]) != chunkMagic || b[2] != chunkVersion {
		return chunkHeader{}, fmt.Errorf("%w: bad magic or version", ErrCorrupt)
	}
	h := chunkHeader{
		typ:        b[3],
		flags:      b[4],
		filterSize: b[5],
		count:      binary.BigEndian.Uint32(b[8:]),
		dataSize:   binary.BigEndian.Uint32(b[12:]),
		first:      binary.BigEndian.Uint64(b[16:]),
		firstTs:    int64(binary.BigEndian.Uint64(b[24:])),
		tag:        binary.BigEndian.Uint64(b[32:]),
		crc:        binary.BigEndian.Uint32(b[40:]),
	}
	if h.count == 0 || uint64(h.dataSize) < uint64(h.count)*recordHeaderSize || h.first+uint64(h.count) < h.first {
		return chunkHeader{}, fmt.Errorf("%w: bad counts", ErrCorrupt)
	}
	return h, nil
}

// chunkCRC is the checksum of a whole chunk b (header, filter, records)
// taken with the crc field as zero.
func chunkCRC(b []byte) uint32 {
	var zero [4]byte
	c := crc32.Update(0, castagnoli, b[:40])
	c = crc32.Update(c, castagnoli, zero[:])
	return crc32.Update(c, castagnoli, b[44:])
}

// checkChunk validates a whole chunk in b (exactly its bytes): header,
// CRC, and that its records fill the data exactly.
func checkChunk(b []byte) (chunkHeader, error) {
	h, err := parseHeader(b)
	if err != nil {
		return h, err
	}
	if int64(len(b)) != h.size() {
		return h, fmt.Errorf("%w: size", ErrCorrupt)
	}
	if chunkCRC(b) != h.crc {
		return h, fmt.Errorf("%w: crc", ErrCorrupt)
	}
	if h.flags&flagSealed != 0 {
		return h, nil // its records are checked once opened (openChunk)
	}
	return h, checkRecords(b, h)
}

// checkRecords checks that a chunk's records fill its data exactly.
func checkRecords(b []byte, h chunkHeader) error {
	data := b[chunkHeaderSize+int(h.filterSize):]
	var n uint32
	for len(data) > 0 {
		if len(data) < recordHeaderSize {
			return fmt.Errorf("%w: record header", ErrCorrupt)
		}
		l := uint64(binary.BigEndian.Uint32(data)) + recordHeaderSize + uint64(binary.BigEndian.Uint16(data[12:]))
		if l > uint64(len(data)) {
			return fmt.Errorf("%w: record length", ErrCorrupt)
		}
		data = data[l:]
		n++
	}
	if n != h.count {
		return fmt.Errorf("%w: record count", ErrCorrupt)
	}
	return nil
}

// decodeRecords calls fn for each record of a chunk checked by checkChunk.
func decodeRecords(b []byte, h chunkHeader, fn func(Entry)) {
	data := b[chunkHeaderSize+int(h.filterSize):]
	off := h.first
	for len(data) > 0 {
		dl := int(binary.BigEndian.Uint32(data))
		ts := int64(binary.BigEndian.Uint64(data[4:]))
		fl := int(binary.BigEndian.Uint16(data[12:]))
		e := Entry{Offset: off, Timestamp: ts}
		e.Filter = string(data[recordHeaderSize : recordHeaderSize+fl])
		e.Data = data[recordHeaderSize+fl : recordHeaderSize+fl+dl]
		fn(e)
		data = data[recordHeaderSize+fl+dl:]
		off++
	}
}

// chunkInfo is what the writer learns of a chunk it encoded.
type chunkInfo struct {
	first          uint64
	firstTs, maxTs int64
	count          uint32
	size           int64
	tag            uint64
}

// appendChunk encodes recs as one chunk at offset first onto buf.
func appendChunk(buf []byte, recs []Record, first, tag uint64, filterSize int) ([]byte, chunkInfo) {
	start := len(buf)
	var hdr [chunkHeaderSize]byte
	buf = append(buf, hdr[:]...)
	var flags uint8
	filtered := false
	for i := range recs {
		if recs[i].Filter == "" {
			flags |= flagUnfiltered
		} else {
			filtered = true
		}
	}
	fs := 0
	if filtered {
		fs = filterSize
		fstart := len(buf)
		buf = append(buf, make([]byte, fs)...)
		bloom := buf[fstart:]
		for i := range recs {
			if f := recs[i].Filter; f != "" {
				bloomAdd(bloom, filterKey(f))
			}
		}
	}
	dstart := len(buf)
	ci := chunkInfo{first: first, count: uint32(len(recs)), tag: tag, maxTs: math.MinInt64}
	for i := range recs {
		r := &recs[i]
		f := filterKey(r.Filter)
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(r.Data)))
		buf = binary.BigEndian.AppendUint64(buf, uint64(r.Timestamp))
		buf = binary.BigEndian.AppendUint16(buf, uint16(len(f)))
		buf = append(buf, f...)
		buf = append(buf, r.Data...)
		if r.Timestamp > ci.maxTs {
			ci.maxTs = r.Timestamp
		}
	}
	ci.firstTs = recs[0].Timestamp
	h := buf[start:]
	binary.BigEndian.PutUint16(h[0:], chunkMagic)
	h[2] = chunkVersion
	h[3] = chunkTypeUser
	h[4] = flags
	h[5] = uint8(fs)
	binary.BigEndian.PutUint32(h[8:], uint32(len(recs)))
	binary.BigEndian.PutUint32(h[12:], uint32(len(buf)-dstart))
	binary.BigEndian.PutUint64(h[16:], first)
	binary.BigEndian.PutUint64(h[24:], uint64(recs[0].Timestamp))
	binary.BigEndian.PutUint64(h[32:], tag)
	binary.BigEndian.PutUint32(h[40:], chunkCRC(h))
	ci.size = int64(len(buf) - start)
	return buf, ci
}

// filterKey is the filter value as stored (cut at maxFilterValue bytes).
func filterKey(f string) string {
	if len(f) > maxFilterValue {
		return f[:maxFilterValue]
	}
	return f
}

// The Bloom filter: two bit positions per value from one 64-bit FNV-1a
// hash (double hashing), as osiris_bloom takes two from phash2.
func bloomBits(v string, m uint32) (uint32, uint32) {
	h := uint64(14695981039346656037)
	for i := 0; i < len(v); i++ {
		h ^= uint64(v[i])
		h *= 1099511628211
	}
	h1, h2 := uint32(h), uint32(h>>32)|1
	return h1 % m, (h1 + h2) % m
}

func bloomAdd(b []byte, v string) {
	a, c := bloomBits(v, uint32(len(b))*8)
	b[a/8] |= 1 << (a % 8)
	b[c/8] |= 1 << (c % 8)
}

func bloomHas(b []byte, v string) bool {
	if len(b) == 0 {
		return false
	}
	a, c := bloomBits(v, uint32(len(b))*8)
	return b[a/8]&(1<<(a%8)) != 0 && b[c/8]&(1<<(c%8)) != 0
}
