package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// A confEntry is one setting of a rabbitmq.conf file: its key (the dot
// separated words, escaped dots unescaped), its value, and where it is.
type confEntry struct {
	key, value string   // key as written
	words      []string // key's words, \. unescaped
	file       string
	line       int
}

// where names the entry's file and line, as errors and warnings do.
func (e confEntry) where() string { return fmt.Sprintf("%s:%d", e.file, e.line) }

// maxIncludeDepth bounds include lines that include each other.
const maxIncludeDepth = 8

// readConf reads a rabbitmq.conf file in cuttlefish's format (RabbitMQ's
// new-style config, deps/cuttlefish src/conf_parse.peg): each line is a
// setting "key = value", a comment starting with #, blank, or "include
// PATH" (a file or a glob, relative to the including file's directory).
// A value runs to the end of the line or to a # (a comment), trailing
// blanks removed, unless it is in single quotes ('a#b' keeps its #). A
// key is words of letters, digits, _ and -, joined by dots (\. is a dot
// inside a word).
func readConf(path string) ([]confEntry, error) {
	return readConfDepth(path, 0)
}

func readConfDepth(path string, depth int) ([]confEntry, error) {
	if depth > maxIncludeDepth {
		return nil, fmt.Errorf("%s: includes nested more than %d deep", path, maxIncludeDepth)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []confEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		text := strings.TrimRight(sc.Text(), "\r")
		trimmed := strings.TrimLeft(text, " \t")
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if inc, ok := includeLine(trimmed); ok {
			entries, err := readIncluded(filepath.Dir(path), inc, depth)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: include %s: %w", path, n, inc, err)
			}
			out = append(out, entries...)
			continue
		}
		key, value, err := parseConfLine(trimmed)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		words, _ := parseConfKey(key) // checked by parseConfLine
		out = append(out, confEntry{key: key, value: value, words: words, file: path, line: n})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// includeLine reads "include PATH", PATH of letters, digits and -_.*/
// (cuttlefish's included_file_or_dir), a comment allowed after it.
func includeLine(s string) (string, bool) {
	rest, ok := strings.CutPrefix(s, "include")
	if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '\t') {
		return "", false
	}
	rest = strings.TrimSpace(stripComment(rest))
	if rest == "" || strings.ContainsFunc(rest, func(r rune) bool { return !isIncludeRune(r) }) {
		return "", false
	}
	return rest, true
}

func isIncludeRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.*/", r)
}

// readIncluded reads the files an include names, in name order.
func readIncluded(dir, pattern string, depth int) ([]confEntry, error) {
	if !filepath.IsAbs(pattern) {
		pattern = filepath.Join(dir, pattern)
	}
	paths, err := filepath.Glob(pattern)
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 && !strings.Contains(pattern, "*") {
		return nil, fmt.Errorf("%w: %s", os.ErrNotExist, pattern)
	}
	sort.Strings(paths)
	var out []confEntry
	for _, p := range paths {
		entries, err := readConfDepth(p, depth+1)
		if err != nil {
			return nil, err
		}
		out = append(out, entries...)
	}
	return out, nil
}

// parseConfLine reads "key = value" (s has no leading blanks).
func parseConfLine(s string) (key, value string, err error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return "", "", fmt.Errorf("%q is not key = value", s)
	}
	key = strings.TrimRight(k, " \t")
	if _, err := parseConfKey(key); err != nil {
		return "", "", err
	}
	v = strings.TrimLeft(v, " \t")
	if strings.HasPrefix(v, "'") {
		end := strings.IndexByte(v[1:], '\'')
		if end < 0 {
			return "", "", fmt.Errorf("%s: a quoted value has no closing '", key)
		}
		value = v[1 : 1+end]
		if rest := strings.TrimSpace(v[2+end:]); rest != "" && !strings.HasPrefix(rest, "#") {
			return "", "", fmt.Errorf("%s: %q after the quoted value", key, rest)
		}
		return key, value, nil
	}
	value = strings.TrimRight(stripComment(v), " \t")
	if value == "" {
		return "", "", fmt.Errorf("%s: no value", key)
	}
	return key, value, nil
}

// stripComment cuts s at its first #.
func stripComment(s string) string {
	if i := strings.IndexByte(s, '#'); i >= 0 {
		return s[:i]
	}
	return s
}

var errConfKey = errors.New("a key is words of letters, digits, _ and - joined by dots")

// parseConfKey splits a key into its words, unescaping \. (a dot inside
// a word).
func parseConfKey(k string) ([]string, error) {
	var words []string
	var b strings.Builder
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c == '\\' && i+1 < len(k) && k[i+1] == '.':
			b.WriteByte('.')
			i++
		case c == '.':
			if b.Len() == 0 {
				return nil, fmt.Errorf("key %q: %w", k, errConfKey)
			}
			words = append(words, b.String())
			b.Reset()
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
			b.WriteByte(c)
		default:
			return nil, fmt.Errorf("key %q: %w", k, errConfKey)
		}
	}
	if b.Len() == 0 {
		return nil, fmt.Errorf("key %q: %w", k, errConfKey)
	}
	return append(words, b.String()), nil
}
