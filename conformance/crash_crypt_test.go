package conformance

import (
	"testing"

	rmq "github.com/rabbitmq/amqp091-go"
)

// TestCrashRecoveryEncrypted is TestCrashRecovery on an encrypted store
// (--data-encryption-key-file): kill -9 at random moments under
// publishers with confirms and acking consumers, restart with the key,
// and no confirmed message is lost or corrupted.
func TestCrashRecoveryEncrypted(t *testing.T) {
	crashRecovery(t, crashQueue{name: "crash-enc", flags: []string{"--data-encryption-key-file", keyFile(t, "key")}})
}

// TestCrashRecoveryEncryptedQuorum is the same on a quorum queue: its
// raft log is the encrypted one.
func TestCrashRecoveryEncryptedQuorum(t *testing.T) {
	crashRecovery(t, crashQueue{name: "crash-enc-qq", args: rmq.Table{"x-queue-type": "quorum"},
		flags: []string{"--data-encryption-key-file", keyFile(t, "key")}})
}
