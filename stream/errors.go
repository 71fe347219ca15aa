package stream

import "errors"

var (
	// ErrClosed is returned by a Log or Reader used after Close (and
	// given to the done callbacks of Appends made after it).
	ErrClosed = errors.New("stream: log closed")
	// ErrCorrupt is a chunk or index entry that fails its checks.
	ErrCorrupt = errors.New("stream: corrupt chunk")
)
