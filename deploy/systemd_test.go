package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/railmq/railmq/internal/testutil"
)

// verifyUnit runs systemd-analyze verify on unit, written as
// railmq.service with ExecStart's /usr/local/bin/railmq replaced by bin,
// and returns its output and error.
func verifyUnit(t *testing.T, analyze, unit, bin string) (string, error) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "railmq.service")
	testutil.WriteFile(t, file, []byte(strings.ReplaceAll(unit, "/usr/local/bin/railmq", bin)))
	return command(2*time.Minute, nil, analyze, "verify", "--man=no", file)
}

// systemd/railmq.service: systemd-analyze verify finds nothing to say
// of it (with ExecStart pointing at the real binary), and it has what the
// issue asks of it: Type=notify (railmq's sd_notify: TestSdNotifyBinary
// in cmd/railmq), the main process notifying, RabbitMQ's LimitNOFILE, a
// restart policy and a stop timeout beyond the broker's own 10 s
// shutdown.
func TestSystemdUnit(t *testing.T) {
	analyze := requireTool(t, "systemd-analyze", "systemd")
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "systemd", "railmq.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{"Type=notify", "NotifyAccess=main", "ExecStart=/usr/local/bin/railmq\n", "User=railmq",
		"LimitNOFILE=65536", "Restart=on-failure", "TimeoutStopSec=120", "KillSignal=SIGTERM", "WantedBy=multi-user.target"} {
		if !strings.Contains(unit, want) {
			t.Errorf("railmq.service lacks %s", want)
		}
	}
	bin := testutil.Binary(t)
	if out, err := verifyUnit(t, analyze, unit, bin); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	// It does check: a bad value is reported.
	if out, _ := verifyUnit(t, analyze, strings.Replace(unit, "Restart=on-failure", "Restart=sometimes", 1), bin); !strings.Contains(out, "sometimes") {
		t.Errorf("systemd-analyze verify took Restart=sometimes silently: %q", out)
	}
}
