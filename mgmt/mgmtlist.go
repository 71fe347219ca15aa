package mgmt

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// RabbitMQ's list parameters, for every list the management API serves:
// name (a substring, or a regular expression with use_regex=true, both
// caseless), sort and sort_reverse, columns (dotted paths), and
// pagination (page, page_size up to 500) with RabbitMQ's envelope.
//
// A list is made of rows that build their JSON object only when it is
// shown: the name filter, a sort by name or vhost and the page are
// decided on the rows, so that one page of 100,000 queues builds 100
// objects; an answer without a page is written object by object, never
// held whole.

const maxPageSize = 500

// row is one object of a list: its name and vhost (the filter and the
// usual sorts), and where its JSON object comes from.
type row struct {
	name, vhost string
	src         rowSource
}

// rowSource builds a row's object when it is shown.
type rowSource interface{ object() map[string]any }

// rowAppender is a rowSource that can also write its object's JSON
// (exactly as json.Marshal writes object()) without building it: a list
// without columns or a sort on a field is written this way.
type rowAppender interface {
	appendObject(b []byte) ([]byte, error)
}

// rowShower is a rowSource whose shown object gets more than the object
// it is sorted by: a queue's samples (lengths_age), added to the rows
// written only, not to every row a sort builds.
type rowShower interface {
	shown(m map[string]any)
}

// mapRow is an object already built.
type mapRow map[string]any

func (m mapRow) object() map[string]any { return m }

// writeList answers items as RabbitMQ would with the request's list
// parameters.
func writeList(w http.ResponseWriter, r *http.Request, items []map[string]any) {
	rows := make([]row, len(items))
	for i, it := range items {
		n, _ := it["name"].(string)
		vh, _ := it["vhost"].(string)
		rows[i] = row{name: n, vhost: vh, src: mapRow(it)}
	}
	writeRows(w, r, rows)
}

// listQuery is a request's list parameters, checked.
type listQuery struct {
	paged      bool
	page, size int
	match      func(string) bool // nil: no name filter
	sort       string
	reverse    bool
	columns    []string
}

// parseList reads r's list parameters; a bad one is answered as RabbitMQ
// 3.10.8 answers it (GET /api/queues?page=0 → 400
// invalid_pagination_parameters "Invalid pagination parameters: page
// number 0, page size undefined"; page=x or a bad regular expression →
// 400 bad_request "Pagination parameters are invalid").
func parseList(w http.ResponseWriter, r *http.Request) (listQuery, bool) {
	q := r.URL.Query()
	// RabbitMQ 3.10.8 pages only when page is given: pagination=true
	// alone answers the plain list, and name filters only a page.
	lq := listQuery{paged: q.Get("page") != "", sort: q.Get("sort"), reverse: q.Get("sort_reverse") == "true"}
	if cols := q.Get("columns"); cols != "" {
		lq.columns = strings.Split(cols, ",")
	}
	if !lq.paged {
		return lq, true
	}
	invalid := func() (listQuery, bool) {
		badRequest(w, "Pagination parameters are invalid")
		return lq, false
	}
	var err error
	if lq.page, err = strconv.Atoi(q.Get("page")); err != nil {
		return invalid()
	}
	lq.size = 100
	sizeText := "undefined"
	if s := q.Get("page_size"); s != "" {
		if lq.size, err = strconv.Atoi(s); err != nil {
			return invalid()
		}
		sizeText = s
	}
	if name := q.Get("name"); name != "" {
		if q.Get("use_regex") == "true" {
			re, err := regexp.Compile("(?i)" + name)
			if err != nil {
				return invalid()
			}
			lq.match = re.MatchString
		} else {
			lower := strings.ToLower(name)
			lq.match = func(s string) bool { return strings.Contains(strings.ToLower(s), lower) }
		}
	}
	if lq.page < 1 || lq.size < 1 || lq.size > maxPageSize {
		apiError(w, http.StatusBadRequest, "invalid_pagination_parameters",
			fmt.Sprintf("Invalid pagination parameters: page number %d, page size %s", lq.page, sizeText))
		return lq, false
	}
	return lq, true
}

// writeRows answers rows as RabbitMQ would with the request's list
// parameters.
func writeRows(w http.ResponseWriter, r *http.Request, rows []row) {
	lq, ok := parseList(w, r)
	if !ok {
		return
	}
	total := len(rows)
	if lq.match != nil {
		kept := rows[:0:0]
		for _, rw := range rows {
			if lq.match(rw.name) {
				kept = append(kept, rw)
			}
		}
		rows = kept
	}
	var built []map[string]any // every row's object, when the sort needs them
	switch lq.sort {
	case "":
	case "name", "vhost":
		key := func(rw row) string { return rw.name }
		if lq.sort == "vhost" {
			key = func(rw row) string { return rw.vhost }
		}
		sort.SliceStable(rows, func(i, j int) bool {
			if lq.reverse {
				return key(rows[j]) < key(rows[i])
			}
			return key(rows[i]) < key(rows[j])
		})
	default:
		built = make([]map[string]any, len(rows))
		for i, rw := range rows {
			built[i] = rw.src.object()
		}
		idx := make([]int, len(rows))
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(i, j int) bool {
			a, b := pathValue(built[idx[i]], lq.sort), pathValue(built[idx[j]], lq.sort)
			if lq.reverse {
				return lessValue(b, a)
			}
			return lessValue(a, b)
		})
		sorted, sortedBuilt := make([]row, len(rows)), make([]map[string]any, len(rows))
		for i, k := range idx {
			sorted[i], sortedBuilt[i] = rows[k], built[k]
		}
		rows, built = sorted, sortedBuilt
	}
	from, to := 0, len(rows)
	if lq.paged {
		filtered := len(rows)
		// No match is 0 pages, and page 1 of them an empty page; a later
		// page is out of range (RabbitMQ 3.10.8: GET
		// /api/connections?page=1&page_size=1 with none open answers
		// page_count 0, items [], and page=2 400 page_out_of_range).
		pages := (filtered + lq.size - 1) / lq.size
		if lq.page > max(pages, 1) {
			apiError(w, http.StatusBadRequest, "page_out_of_range", fmt.Sprintf("Page out of range, page: %d page size: %d, len: %d", lq.page, lq.size, filtered))
			return
		}
		from = (lq.page - 1) * lq.size
		to = min(from+lq.size, filtered)
		items := make([]map[string]any, 0, to-from)
		for i := from; i < to; i++ {
			items = append(items, lq.object(rows, built, i))
		}
		writeJSON(w, map[string]any{"filtered_count": filtered, "item_count": to - from, "items": items,
			"page": lq.page, "page_count": pages, "page_size": lq.size, "total_count": total})
		return
	}
	streamJSON(w, to-from, func(b []byte, i int) ([]byte, error) {
		if ap, ok := rows[from+i].src.(rowAppender); ok && built == nil && lq.columns == nil {
			return ap.appendObject(b)
		}
		return appendJSON(b, lq.object(rows, built, from+i))
	})
}

// object is row i's object, with the request's columns.
func (lq *listQuery) object(rows []row, built []map[string]any, i int) map[string]any {
	var m map[string]any
	if built != nil {
		m = built[i]
	} else {
		m = rows[i].src.object()
	}
	if s, ok := rows[i].src.(rowShower); ok {
		s.shown(m)
	}
	if lq.columns != nil {
		m = project(m, lq.columns)
	}
	return m
}

// streamJSON writes a JSON list of n objects, each encoded (appended to
// a buffer used again for the next) and written in turn: a long list is
// never held whole, encoded or not.
func streamJSON(w http.ResponseWriter, n int, item func(b []byte, i int) ([]byte, error)) {
	w.Header().Set("Content-Type", "application/json")
	bw := bufio.NewWriterSize(w, 64<<10)
	_ = bw.WriteByte('[')
	var b []byte
	for i := 0; i < n; i++ {
		var err error
		b, err = item(b[:0], i)
		if err != nil {
			// The status line is out: the answer ends here, cut, as
			// a client sees a connection lost.
			panic(http.ErrAbortHandler)
		}
		if i > 0 {
			_ = bw.WriteByte(',')
		}
		if _, err := bw.Write(b); err != nil {
			return // the client left
		}
	}
	_, _ = bw.WriteString("]\n")
	_ = bw.Flush()
}

// pathValue is the value at a dotted path of m, or nil. The objects
// nest maps of any value and the typed maps of rates and details
// ({"rate": r} is a map[string]float64): a path goes through both.
func pathValue(m map[string]any, path string) any {
	var v any = m
	for _, p := range strings.Split(path, ".") {
		var ok bool
		switch mm := v.(type) {
		case map[string]any:
			v, ok = mm[p]
		case map[string]float64:
			v, ok = mm[p]
		case map[string]int64:
			v, ok = mm[p]
		case map[string]int:
			v, ok = mm[p]
		case map[string]string:
			v, ok = mm[p]
		}
		if !ok {
			return nil
		}
	}
	return v
}

// project keeps the dotted paths of m.
func project(m map[string]any, paths []string) map[string]any {
	out := map[string]any{}
	for _, p := range paths {
		v := pathValue(m, p)
		if v == nil {
			continue
		}
		parts := strings.Split(p, ".")
		dst := out
		for _, k := range parts[:len(parts)-1] {
			next, ok := dst[k].(map[string]any)
			if !ok {
				next = map[string]any{}
				dst[k] = next
			}
			dst = next
		}
		dst[parts[len(parts)-1]] = v
	}
	return out
}

// lessValue orders numbers by value, anything else by its text.
func lessValue(a, b any) bool {
	fa, aok := number(a)
	fb, bok := number(b)
	if aok && bok {
		return fa < fb
	}
	return fmt.Sprint(a) < fmt.Sprint(b)
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int32:
		return float64(x), true
	case int64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// asMaps turns a list of structs into the maps writeList works on.
func asMaps(v any) []map[string]any {
	b, _ := json.Marshal(v)
	var out []map[string]any
	_ = json.Unmarshal(b, &out)
	if out == nil {
		out = []map[string]any{}
	}
	return out
}
