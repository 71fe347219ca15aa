package main

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// runCaptured runs run(args) with env as the only RAILMQ_ variables and
// returns its exit code and what it wrote to stderr.
func runCaptured(t *testing.T, env map[string]string, args ...string) (int, string) {
	t.Helper()
	cleanEnv(t)
	for k, v := range env {
		t.Setenv(k, v)
	}
	// GOMAXPROCS set: run leaves the P count alone (setProcs).
	t.Setenv("GOMAXPROCS", strconv.Itoa(runtime.GOMAXPROCS(0)))
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stderr := os.Stderr
	os.Stderr = f // the flags' output and the logger's "stderr" are read when used
	code := run(args)
	os.Stderr = stderr
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return code, string(b)
}

// logged finds the JSON log line whose msg is msg.
func logged(out, msg string) map[string]any {
	for _, l := range strings.Split(out, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
			return m
		}
	}
	return nil
}

// run's exit codes and what it says, for options it refuses and for a
// broker that cannot start; the conformance tests run the binary for the
// rest (TestBinarySIGTERM, TestTLSBinaryBadFlags, ...).
func TestRunExitCodes(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		name   string
		env    map[string]string
		args   []string
		code   int
		out    string         // stderr starts so
		msg    string         // or a JSON log line with this msg ...
		fields map[string]any // ... and these fields
	}{
		{name: "help", args: []string{"-h"}, code: 0, out: "railmq 0.1.0: an AMQP 0-9-1 message broker.\n"},
		{name: "unknown flag", args: []string{"--bogus"}, code: 2, out: "flag provided but not defined: -bogus\nrailmq 0.1.0"},
		{name: "bad variable", env: map[string]string{"RAILMQ_FRAME_MAX": "big"}, code: 2, out: "railmq: RAILMQ_FRAME_MAX=\"big\": parse error\n"},
		{name: "log level", args: []string{"--log-level=loud"}, code: 2, out: "railmq: unrecognized level: \"loud\"\n"},
		{name: "log format", args: []string{"--log-format=xml"}, code: 2, out: "railmq: unknown log format \"xml\" (console or json)\n"},
		{name: "refused option", args: []string{"--log-format=json", "--channel-max=0"}, code: 2,
			msg: "channel-max must be 1..65535", fields: map[string]any{"level": "error"}},
		{name: "refused option with error", args: []string{"--log-format=json", "--users=x"}, code: 2,
			msg: "bad users", fields: map[string]any{"level": "error", "error": `user "x" is not name:password`}},
		{name: "refused cluster", args: []string{"--log-format=json", "--cluster-listen=:1", "--node-name=a", "--cluster-peers=a=h:1", "--cluster-secret-file=" + missing}, code: 2,
			msg: "cannot read the cluster secret", fields: map[string]any{"file": missing, "error": "open " + missing + ": no such file or directory"}},
		{name: "management port taken", args: []string{"--log-format=json", "--management-listen=" + taken.Addr().String()}, code: 1,
			msg: "cannot listen for the management API", fields: map[string]any{"level": "error"}},
		{name: "no listen address", args: []string{"--log-format=json", "--data-dir=" + t.TempDir(), "--listen=,"}, code: 1,
			msg: "cannot listen", fields: map[string]any{"error": "--listen: no address"}},
		{name: "listen port taken", args: []string{"--log-format=json", "--data-dir=" + t.TempDir(), "--listen=127.0.0.1:0," + taken.Addr().String()}, code: 1,
			msg: "cannot listen"},
		{name: "definitions missing", args: []string{"--log-format=json", "--data-dir=" + t.TempDir(), "--listen=127.0.0.1:0", "--load-definitions=" + missing}, code: 1,
			msg: "cannot start broker: loading definitions", fields: map[string]any{"error": "open " + missing + ": no such file or directory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runCaptured(t, tc.env, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\n%s", code, tc.code, out)
			}
			if !strings.HasPrefix(out, tc.out) {
				t.Errorf("stderr:\n%s\nwant it to start:\n%s", out, tc.out)
			}
			if tc.msg == "" {
				return
			}
			m := logged(out, tc.msg)
			if m == nil {
				t.Fatalf("no log line %q:\n%s", tc.msg, out)
			}
			for k, v := range tc.fields {
				if m[k] != v {
					t.Errorf("%s: %v, want %v", k, m[k], v)
				}
			}
		})
	}
}

// A refusal is logged as an error: its message, its fields, then its
// error, if any, in that order.
func TestLogRefusal(t *testing.T) {
	no, odd := errors.New("no"), errors.New("odd")
	file := zap.String("file", "f")
	for _, tc := range []struct {
		name   string
		err    error
		msg    string
		fields []zap.Field
	}{
		{"message", &refusal{msg: "channel-max must be 1..65535"}, "channel-max must be 1..65535", nil},
		{"with error", &refusal{msg: "bad users", err: no}, "bad users", []zap.Field{zap.Error(no)}},
		{"fields first", &refusal{msg: "cannot read the cluster secret", fields: []zap.Field{file}, err: no},
			"cannot read the cluster secret", []zap.Field{file, zap.Error(no)}},
		{"fields without error", &refusal{msg: "cannot read the cluster secret", fields: []zap.Field{file}},
			"cannot read the cluster secret", []zap.Field{file}},
		{"not a refusal", odd, "bad options", []zap.Field{zap.Error(odd)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.DebugLevel)
			logRefusal(zap.New(core), tc.err)
			all := logs.AllUntimed()
			if len(all) != 1 || all[0].Level != zapcore.ErrorLevel || all[0].Message != tc.msg {
				t.Fatalf("logged %+v, want one error %q", all, tc.msg)
			}
			var got []zap.Field // zap.Error(nil) is a Skip field, which encodes nothing
			for _, f := range all[0].Context {
				if f.Type != zapcore.SkipType {
					got = append(got, f)
				}
			}
			if !reflect.DeepEqual(got, tc.fields) {
				t.Fatalf("fields %v, want %v", got, tc.fields)
			}
		})
	}
}
