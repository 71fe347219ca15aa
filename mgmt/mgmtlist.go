package mgmt

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// RabbitMQ's list parameters, for every list the management API serves:
// name (a substring, or a regular expression with use_regex=true),
// sort and sort_reverse, columns (dotted paths), and pagination (page,
// page_size up to 500) with RabbitMQ's envelope.

const maxPageSize = 500

// writeList answers items as RabbitMQ would with the request's list
// parameters.
func writeList(w http.ResponseWriter, r *http.Request, items []map[string]any) {
	q := r.URL.Query()
	total := len(items)
	paged := q.Get("page") != "" || q.Get("pagination") == "true"
	// RabbitMQ 3.10 filters by name only in a paginated request.
	if name := q.Get("name"); name != "" && paged {
		var match func(string) bool
		if q.Get("use_regex") == "true" {
			re, err := regexp.Compile(name)
			if err != nil {
				badRequest(w, fmt.Sprintf("invalid regular expression %q: %v", name, err))
				return
			}
			match = re.MatchString
		} else {
			lower := strings.ToLower(name)
			match = func(s string) bool { return strings.Contains(strings.ToLower(s), lower) }
		}
		kept := items[:0:0]
		for _, it := range items {
			if n, _ := it["name"].(string); match(n) {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	if key := q.Get("sort"); key != "" {
		rev := q.Get("sort_reverse") == "true"
		sort.SliceStable(items, func(i, j int) bool {
			less := lessValue(pathValue(items[i], key), pathValue(items[j], key))
			if rev {
				return lessValue(pathValue(items[j], key), pathValue(items[i], key))
			}
			return less
		})
	}
	if cols := q.Get("columns"); cols != "" {
		paths := strings.Split(cols, ",")
		for i, it := range items {
			items[i] = project(it, paths)
		}
	}
	if !paged {
		writeJSON(w, items)
		return
	}
	page, err1 := strconv.Atoi(orDefault(q.Get("page"), "1"))
	size, err2 := strconv.Atoi(orDefault(q.Get("page_size"), "100"))
	if err1 != nil || err2 != nil || page < 1 || size < 1 || size > maxPageSize {
		apiError(w, http.StatusBadRequest, "invalid_pagination_parameters",
			fmt.Sprintf("Invalid pagination parameters: page number %s, page size %s", q.Get("page"), orDefault(q.Get("page_size"), "100")))
		return
	}
	filtered := len(items)
	pages := (filtered + size - 1) / size
	if pages == 0 {
		pages = 1
	}
	if page > pages {
		apiError(w, http.StatusBadRequest, "page_out_of_range", fmt.Sprintf("Page out of range, page: %d page size: %d, len: %d", page, size, filtered))
		return
	}
	from := (page - 1) * size
	to := min(from+size, filtered)
	writeJSON(w, map[string]any{"filtered_count": filtered, "item_count": to - from, "items": items[from:to],
		"page": page, "page_count": pages, "page_size": size, "total_count": total})
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// pathValue is the value at a dotted path of m, or nil.
func pathValue(m map[string]any, path string) any {
	var v any = m
	for _, p := range strings.Split(path, ".") {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
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
