package cluster

// hashicorp/raft logs through go-hclog. zapHCLog is an hclog.Logger that
// writes each of raft's lines as a zap entry of its own: raft's message as
// the message, its key/value pairs as typed fields (an error as "error",
// a peer's address as a string, a number as a number), its level mapped
// (trace and debug to debug), and the group it is about named in every
// line: "raft_group" (meta, or a quorum queue's group id), and for a
// queue's group the queue ("queue": "'q' in vhost '/'", GroupConfig.Label).

import (
	"fmt"
	"io"
	"log"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

type zapHCLog struct {
	base  *zap.Logger // raft's, without the group
	z     *zap.Logger // with the group and the implied fields
	name  string
	level hclog.Level
	args  []any // implied, for ImpliedArgs
}

// newHCLog adapts z for raft: lines at level and up (raft's info lines
// about every election are many; Warn shows what needs a look).
func newHCLog(z *zap.Logger, level hclog.Level) hclog.Logger {
	return &zapHCLog{base: z, z: z.With(zap.String("raft_group", "meta")), name: "meta", level: level}
}

func (l *zapHCLog) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off || level < l.level {
		return
	}
	var zl zapcore.Level
	switch level {
	case hclog.Trace, hclog.Debug, hclog.NoLevel:
		zl = zapcore.DebugLevel
	case hclog.Info:
		zl = zapcore.InfoLevel
	case hclog.Warn:
		zl = zapcore.WarnLevel
	default:
		zl = zapcore.ErrorLevel
	}
	if ce := l.z.Check(zl, msg); ce != nil {
		ce.Write(hcFields(args)...)
	}
}

// hcFields turns hclog's alternating keys and values into fields.
func hcFields(args []any) []zap.Field {
	f := make([]zap.Field, 0, (len(args)+1)/2)
	for i := 0; i < len(args); i += 2 {
		if i+1 == len(args) {
			f = append(f, zap.Any("extra_value", args[i]))
			break
		}
		key, ok := args[i].(string)
		if !ok {
			key = fmt.Sprint(args[i])
		}
		key = strings.ReplaceAll(strings.ReplaceAll(key, "-", "_"), " ", "_")
		switch v := args[i+1].(type) {
		case error:
			f = append(f, zap.NamedError(key, v))
		case time.Duration:
			f = append(f, zap.Duration(key, v))
		case string, bool, int, int32, int64, uint, uint32, uint64, float64:
			f = append(f, zap.Any(key, v))
		case hclog.Format:
			f = append(f, zap.String(key, fmt.Sprintf(v[0].(string), v[1:]...)))
		case fmt.Stringer:
			f = append(f, zap.Stringer(key, v))
		default:
			f = append(f, zap.String(key, fmt.Sprintf("%+v", v)))
		}
	}
	return f
}

func (l *zapHCLog) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l *zapHCLog) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l *zapHCLog) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l *zapHCLog) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *zapHCLog) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *zapHCLog) IsTrace() bool { return l.level <= hclog.Trace }
func (l *zapHCLog) IsDebug() bool { return l.level <= hclog.Debug }
func (l *zapHCLog) IsInfo() bool  { return l.level <= hclog.Info }
func (l *zapHCLog) IsWarn() bool  { return l.level <= hclog.Warn }
func (l *zapHCLog) IsError() bool { return l.level <= hclog.Error }

func (l *zapHCLog) ImpliedArgs() []any { return l.args }

func (l *zapHCLog) With(args ...any) hclog.Logger {
	c := *l
	c.z = l.z.With(hcFields(args)...)
	c.args = append(append([]any(nil), l.args...), args...)
	return &c
}

func (l *zapHCLog) Name() string { return l.name }

// Named names a sub-logger: raft names its parts ("raft-net",
// "snapshot"), which go in "raft_part"; a group's own logger is made by
// forGroup.
func (l *zapHCLog) Named(name string) hclog.Logger {
	c := *l
	c.name = l.name + "." + name
	c.z = l.z.With(zap.String("raft_part", name))
	return &c
}

func (l *zapHCLog) ResetNamed(name string) hclog.Logger { return l.Named(name) }

// groupLog is hl for a group: forGroup's when hl is a zapHCLog.
func groupLog(hl hclog.Logger, id, label string) hclog.Logger {
	if l, ok := hl.(*zapHCLog); ok {
		return l.forGroup(id, label)
	}
	return hl.Named(id)
}

// forGroup is the logger of a quorum queue's (or stream's) group: its id,
// and label (what it replicates), in every line.
func (l *zapHCLog) forGroup(id, label string) hclog.Logger {
	c := *l
	c.name = id
	z := l.base.With(zap.String("raft_group", id))
	if label != "" {
		z = z.With(zap.String("queue", label))
	}
	c.z = z
	return &c
}

func (l *zapHCLog) SetLevel(level hclog.Level) { l.level = level }
func (l *zapHCLog) GetLevel() hclog.Level      { return l.level }

func (l *zapHCLog) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(l.StandardWriter(opts), "", 0)
}

func (l *zapHCLog) StandardWriter(*hclog.StandardLoggerOptions) io.Writer { return hcWriter{l} }

// hcWriter takes what a standard logger writes as warnings.
type hcWriter struct{ l *zapHCLog }

func (w hcWriter) Write(p []byte) (int, error) {
	w.l.Warn(strings.TrimSpace(string(p)))
	return len(p), nil
}
