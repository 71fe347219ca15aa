package stream

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// segInfo is all that is kept in memory of a segment: O(segments) for
// the whole log, whatever its size.
type segInfo struct {
	first          uint64 // offset of its first record (its file name)
	firstTs, maxTs int64  // unix ms of its first and newest record (0: empty)
	size           int64  // durable bytes of the segment file
	idxSize        int64  // bytes of the index file
}

func segName(first uint64) string { return fmt.Sprintf("%020d.seg", first) }
func idxName(first uint64) string { return fmt.Sprintf("%020d.idx", first) }

// listSegments returns the first offsets of the segments in dir, in order.
func listSegments(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []uint64
	for _, e := range ents {
		n := e.Name()
		if !strings.HasSuffix(n, ".seg") || len(n) != 24 {
			continue
		}
		v, err := strconv.ParseUint(n[:20], 10, 64)
		if err != nil {
			continue
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// syncDir makes a directory's entries (created, renamed, removed files)
// durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// createSegment creates an empty segment and its index, synced.
func createSegment(dir string, first uint64) (seg, idx *os.File, err error) {
	seg, err = os.OpenFile(filepath.Join(dir, segName(first)), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, nil, err
	}
	idx, err = os.OpenFile(filepath.Join(dir, idxName(first)), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		seg.Close()
		return nil, nil, err
	}
	fail := func(err error) (*os.File, *os.File, error) {
		seg.Close()
		idx.Close()
		return nil, nil, err
	}
	if _, err := seg.Write(segHeader[:]); err != nil {
		return fail(err)
	}
	if _, err := idx.Write(idxHeader[:]); err != nil {
		return fail(err)
	}
	if err := seg.Sync(); err != nil {
		return fail(err)
	}
	if err := idx.Sync(); err != nil {
		return fail(err)
	}
	if err := syncDir(dir); err != nil {
		return fail(err)
	}
	return seg, idx, nil
}
