package main

import (
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// nodeCore adds the node's name to every line it writes, after the
// line's own fields, so that lines keep their shape ("msg":"listening",
// "addr":...) and gain "node" at the end. A line that names a node itself
// (a "node" field of its own) is left as it is: one key, once.
type nodeCore struct {
	zapcore.Core
	node zapcore.Field
}

// withNode wraps a logger's core in a nodeCore.
func withNode(node string) zap.Option {
	return zap.WrapCore(func(c zapcore.Core) zapcore.Core { return nodeCore{c, zap.String("node", node)} })
}

func (c nodeCore) With(fields []zapcore.Field) zapcore.Core {
	for _, f := range fields {
		if f.Key == c.node.Key {
			return c.Core.With(fields) // its lines name their node
		}
	}
	return nodeCore{c.Core.With(fields), c.node}
}

func (c nodeCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c nodeCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	for _, f := range fields {
		if f.Key == c.node.Key {
			return c.Core.Write(e, fields)
		}
	}
	return c.Core.Write(e, append(fields[:len(fields):len(fields)], c.node))
}
