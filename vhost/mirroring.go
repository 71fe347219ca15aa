package vhost

import "sort"

// Classic queue mirroring's policy keys (RabbitMQ 3.x,
// rabbit_mirror_queue_misc validate_policy). railmq has no mirroring
// (quorum queues replace it): a policy carrying them, from a 3.x
// definitions file or a script written for 3.x, is accepted and the keys
// are kept (the policy reads back as it was written) but do nothing; the
// management API logs a warning naming them (MirroringKeys).
var mirroringKeys = []string{"ha-mode", "ha-params", "ha-sync-mode", "ha-sync-batch-size", "ha-promote-on-shutdown", "ha-promote-on-failure"}

func init() {
	for _, k := range mirroringKeys {
		policyKeys[k] = struct {
			arg  string
			kind string
		}{"", "ignored"}
	}
}

// MirroringKeys are the classic mirroring keys def has, sorted (none:
// nil).
func MirroringKeys(def map[string]any) []string {
	var out []string
	for _, k := range mirroringKeys {
		if _, ok := def[k]; ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}
