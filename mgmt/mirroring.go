package mgmt

import (
	"go.uber.org/zap"

	"github.com/railmq/railmq/vhost"
)

// warnMirroring logs a warning when a policy carries classic mirroring
// keys (ha-mode, ha-params, ha-sync-mode, ...): accepted, kept, and
// ignored (vhost/mirroring.go).
func warnMirroring(log *zap.Logger, vh, name string, def map[string]any) {
	if keys := vhost.MirroringKeys(def); len(keys) > 0 {
		log.Warn("policy keys for classic queue mirroring are ignored: railmq has no mirroring (quorum queues replace it)",
			zap.String("vhost", vh), zap.String("policy", name), zap.Strings("keys", keys))
	}
}
