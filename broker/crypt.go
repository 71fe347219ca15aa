package broker

import (
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/railmq/railmq/crypt"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/stream"
)

// Encryption at rest (docs/encryption.md): Options.DataKeys reach the
// store (persist.Options.Keys), the page files (an encrypted spill), the
// raft logs and snapshots (cluster.NodeConfig.Keys) and the streams
// (stream.Options.Seal).

// streamSealer is the streams' Sealer under ks (nil: none).
func streamSealer(ks *crypt.Keys) (stream.Sealer, error) {
	if ks == nil {
		return nil, nil
	}
	return ks.Sealer()
}

// openSpill is how the page files are opened: encrypted with a key.
func openSpill(ks *crypt.Keys) func(string, int64, *atomic.Int64, func(), *zap.Logger) (*persist.Spill, error) {
	if ks == nil {
		return persist.OpenSpill
	}
	return persist.OpenEncryptedSpill
}
