package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Tables: aligned columns under a header line. Interactive tables show
// sizes in B, KiB, MiB, GiB and rates per second. With --non-interactive
// they are printed as rabbitmqadmin v2 prints them for scripts
// (rabbitmqadmin-ng src/output.rs TableStyler: tabled's borderless style,
// Padding::new(0, 1, 0, 0), Remove::row(Rows::first()), newlines in a
// cell replaced with ","): no header line, each column as wide as its
// widest cell and one space, figures as the API gives them. Lines carry
// no trailing blanks.

// table prints rows' cols, each cell from cell.
func (c *client) table(rows []map[string]any, cols []string, cell func(map[string]any, string) string) error {
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	var buf strings.Builder
	if c.nonInteractive {
		tw = tabwriter.NewWriter(&buf, 0, 0, 1, ' ', 0)
	} else {
		fmt.Fprintln(tw, strings.Join(cols, "\t"))
	}
	for _, r := range rows {
		vals := make([]string, len(cols))
		for i, col := range cols {
			vals[i] = cell(r, col)
			if c.nonInteractive {
				vals[i] = strings.ReplaceAll(strings.ReplaceAll(vals[i], "\t", " "), "\n", ",")
			}
		}
		fmt.Fprintln(tw, strings.Join(vals, "\t"))
	}
	if err := tw.Flush(); err != nil || !c.nonInteractive {
		return err
	}
	for _, l := range strings.SplitAfter(buf.String(), "\n") {
		if l != "" {
			fmt.Fprintln(c.out, strings.TrimRight(l, " \n"))
		}
	}
	return nil
}

// byteColumns are the API's fields that are sizes in bytes.
var byteColumns = map[string]bool{"memory": true, "mem_used": true, "mem_limit": true, "disk_free": true, "disk_free_limit": true,
	"recv_oct": true, "send_oct": true, "memory_used": true, "payload_bytes": false}

// cell prints one value of column col.
func (c *client) cell(col string, v any) string {
	last := col[strings.LastIndex(col, ".")+1:]
	if f, ok := v.(float64); ok && !c.nonInteractive {
		switch {
		case byteColumns[last] || strings.HasPrefix(last, "message_bytes"):
			return humanBytes(f)
		case last == "rate":
			return strconv.FormatFloat(f, 'f', 1, 64) + "/s"
		}
	}
	switch x := v.(type) {
	case nil:
		return ""
	case float64:
		return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.1f", x), "0"), ".")
	case string:
		return x
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// humanBytes is n bytes in B, KiB, MiB, GiB or TiB.
func humanBytes(n float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for n >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	if i == 0 {
		return strconv.FormatFloat(n, 'f', 0, 64) + " B"
	}
	return strconv.FormatFloat(n, 'f', 1, 64) + " " + units[i]
}
