package main

import (
	"errors"
	"fmt"
	"math"
	"net"
	"regexp"
	"strconv"
	"strings"
)

// The value syntaxes of RabbitMQ's schema (deps/rabbit/priv/schema/
// rabbit.schema, v4.1.0), each read into the form railmq's flag takes.

// confPort reads a port, 1..65535.
func confPort(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 65535 {
		return 0, errors.New("not a port (1..65535)")
	}
	return n, nil
}

// confListener reads a listeners.tcp.N or listeners.ssl.N value, the
// schema's [integer, ip]: a port (every interface, as railmq's ":5672"),
// or IP:port (cuttlefish splits at the last colon, so ::1:5672 is
// [::1]:5672; the bracketed form is read too).
func confListener(v string) (string, error) {
	if !strings.Contains(v, ":") {
		port, err := confPort(v)
		if err != nil {
			return "", errors.New("not a port or IP:port")
		}
		return ":" + strconv.Itoa(port), nil
	}
	i := strings.LastIndexByte(v, ':')
	if i <= 0 {
		return "", errors.New("not a port or IP:port")
	}
	host := strings.TrimSuffix(strings.TrimPrefix(v[:i], "["), "]")
	port, err := confPort(v[i+1:])
	if err != nil {
		return "", err
	}
	if net.ParseIP(host) == nil {
		return "", fmt.Errorf("%q is not an IP address", host)
	}
	return net.JoinHostPort(host, strconv.Itoa(port)), nil
}

// confBool reads the schema's {enum, [true, false]}.
func confBool(v string) (bool, error) {
	switch v {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, errors.New("not true or false")
}

// confInt reads a non-negative integer of at most max.
func confInt(v string, max int64) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > max {
		return 0, fmt.Errorf("not an integer from 0 to %d", max)
	}
	return n, nil
}

// confFloat reads the schema's float: a decimal number, not negative.
func confFloat(v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || strings.ContainsAny(v, "eEnN") {
		return 0, errors.New("not a decimal number such as 0.4")
	}
	return f, nil
}

// fraction writes f as railmq's relative figures take it: with a
// decimal point, since "1" would be one byte.
func fraction(f float64) string {
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// informationUnit is rabbit_resource_monitor_misc:parse_information_unit's
// pattern (deps/rabbit_common, v4.1.0), with t and T, which the schema's
// validator accepts (config_schema_SUITE's "disk_free_limit.absolute =
// 2T").
var informationUnit = regexp.MustCompile(`^([0-9]+)(kB|Ki|Mi|Gi|Ti|Pi|KB|MB|GB|TB|PB|kb|ki|mb|gb|tb|pb|Kb|Mb|Gb|Tb|Pb|kiB|KiB|MiB|GiB|TiB|PiB|kib|mib|gib|tib|pib|KIB|MIB|GIB|TIB|PIB|k|K|m|M|g|G|t|T|p|P)?$`)

// confBytes reads vm_memory_high_watermark.absolute and
// disk_free_limit.absolute: bytes, or digits and a unit. kB, MB, GB, TB,
// PB (any case) are powers of 1000; KiB, Ki, MiB, Mi, ... powers of
// 1024; a single letter, k, M, G, T or P, is a power of 1024, as RabbitMQ
// 3.10 reads it (and as railmq's --vm-memory-high-watermark does), where
// RabbitMQ 3.13 and later read it as a power of 1000.
func confBytes(v string) (int64, error) {
	m := informationUnit.FindStringSubmatch(v)
	if m == nil {
		return 0, errors.New("not a size (supported formats: 500MB, 500MiB, 10GB, 10GiB, 2TB, 2TiB, 10000000000)")
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, errors.New("too large")
	}
	mult := int64(1)
	if u := strings.ToLower(m[2]); u != "" {
		pow := strings.IndexByte("kmgtp", u[0]) + 1
		base := int64(1000)
		if len(u) == 1 || strings.Contains(u, "i") {
			base = 1024
		}
		for range pow {
			mult *= base
		}
	}
	if n > math.MaxInt64/mult {
		return 0, errors.New("too large")
	}
	return n * mult, nil
}

// confByteSize reads cuttlefish's bytesize (frame_max): bytes, or digits
// and KB, MB or GB, powers of 1024 (cuttlefish_bytesize).
func confByteSize(v string) (int64, error) {
	mult := int64(1)
	for i, u := range []string{"KB", "MB", "GB"} {
		if num, ok := strings.CutSuffix(v, u); ok {
			v, mult = num, int64(1)<<(10*(i+1))
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > math.MaxUint32/mult {
		return 0, errors.New("not a size in bytes (or with KB, MB, GB) up to 4GB")
	}
	return n * mult, nil
}

// logLevels maps RabbitMQ's log levels (log.console.level's enum) to
// railmq's: notice is info; critical, alert and emergency are error; none
// leaves only fatal lines.
var logLevels = map[string]string{
	"debug": "debug", "info": "info", "notice": "info", "warning": "warn", "error": "error",
	"critical": "error", "alert": "error", "emergency": "error", "none": "fatal",
}

func confLogLevel(v string) (string, error) {
	if l, ok := logLevels[v]; ok {
		return l, nil
	}
	return "", errors.New("not a level (debug, info, notice, warning, error, critical, alert, emergency, none)")
}

// confNodeHost is the host of a RabbitMQ node name, rabbit@host.
func confNodeHost(v string) (string, error) {
	name, host, ok := strings.Cut(v, "@")
	if !ok || name == "" || host == "" || strings.ContainsAny(v, ", =") {
		return "", errors.New("not a node name such as rabbit@hostname")
	}
	return host, nil
}
