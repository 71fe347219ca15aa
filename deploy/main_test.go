package deploy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	stopDockerd()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// repoRoot is the module's root, two levels above this file's package.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Dir(filepath.Dir(file))
}

// requireTool finds an installed program the test drives. CI installs it
// (.ci/run) and sets RAILMQ_REQUIRE_TOOLS, so that it fails there rather
// than skips; elsewhere a missing tool skips the test, saying what to
// install.
func requireTool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("RAILMQ_REQUIRE_TOOLS") != "" {
		t.Fatalf("%s is not installed (apt-get install %s)", name, pkg)
	}
	t.Skipf("%s is not installed (apt-get install %s)", name, pkg)
	return ""
}

// command runs name with args (env added to the test's), within timeout,
// and returns its combined output and error.
func command(timeout time.Duration, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%s %s: no end within %v: %w", name, strings.Join(args, " "), timeout, ctx.Err())
	}
	return out.String(), err
}

// must runs name with args as command does and fails the test when it
// fails; it returns the output.
func must(t *testing.T, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	out, err := command(timeout, nil, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

var (
	dockerOnce sync.Once
	dockerErr  error
	dockerdMu  sync.Mutex
	dockerd    *exec.Cmd // started by this test process, stopped by TestMain
)

// requireDocker returns once a Docker engine answers: the one running, or
// a dockerd this process starts (and TestMain stops). Without the docker
// client the test is skipped (failed under RAILMQ_REQUIRE_TOOLS); with
// it, an engine that cannot be started fails the test, saying why.
func requireDocker(t *testing.T) {
	t.Helper()
	requireTool(t, "docker", "docker.io")
	dockerOnce.Do(func() { dockerErr = startDocker() })
	if dockerErr != nil {
		t.Fatalf("no Docker engine: %v", dockerErr)
	}
}

// startDocker starts dockerd unless an engine already answers, and waits
// for it.
func startDocker() error {
	if _, err := command(30*time.Second, nil, "docker", "info"); err == nil {
		return nil
	}
	bin, err := exec.LookPath("dockerd")
	if err != nil {
		return fmt.Errorf("the engine does not answer and dockerd is not installed (apt-get install docker.io): %w", err)
	}
	logf, err := os.CreateTemp("", "railmq-dockerd-*.log")
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting dockerd: %w", err)
	}
	dockerdMu.Lock()
	dockerd = cmd
	dockerdMu.Unlock()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			dockerdMu.Lock()
			dockerd = nil
			dockerdMu.Unlock()
			log, _ := os.ReadFile(logf.Name())
			return fmt.Errorf("dockerd exited (%v); its log (%s):\n%s", err, logf.Name(), tail(string(log), 30))
		case <-time.After(500 * time.Millisecond):
		}
		if _, err := command(10*time.Second, nil, "docker", "info"); err == nil {
			go func() { dockerdExit <- <-exited }()
			return nil
		}
	}
	log, _ := os.ReadFile(logf.Name())
	return fmt.Errorf("dockerd started but does not answer after 90 s; its log (%s):\n%s", logf.Name(), tail(string(log), 30))
}

var dockerdExit = make(chan error, 1)

// stopDockerd stops the dockerd this process started, if any: SIGTERM,
// then SIGKILL after 60 s.
func stopDockerd() {
	dockerdMu.Lock()
	cmd := dockerd
	dockerd = nil
	dockerdMu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-dockerdExit:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-dockerdExit
	}
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

var (
	imageOnce sync.Once
	imageErr  error
)

// testImage is the tag make image builds for these tests.
const testImage = "railmq:deploy-test"

// buildImage runs make image (once per test process) with the tag
// testImage and returns the tag.
func buildImage(t *testing.T) string {
	t.Helper()
	requireDocker(t)
	requireTool(t, "make", "make")
	imageOnce.Do(func() {
		out, err := command(20*time.Minute, nil, "make", "-C", repoRoot(t), "image", "IMAGE="+testImage, "LATEST=")
		if err != nil {
			imageErr = fmt.Errorf("make image: %w\n%s", err, tail(out, 40))
		}
	})
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return testImage
}
