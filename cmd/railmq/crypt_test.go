package main

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/railmq/railmq/crypt"
)

// The key's flags are also rabbitmq.conf keys (railmq.FLAG, as every
// flag) and RAILMQ_ variables; the keys they name are read into the
// broker's options, and a bad one is a refusal naming the file.
func TestDataEncryptionOptions(t *testing.T) {
	dir := t.TempDir()
	key, old := filepath.Join(dir, "key"), filepath.Join(dir, "old")
	if err := os.WriteFile(key, []byte(hex.EncodeToString(bytes.Repeat([]byte{1}, 32))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old, bytes.Repeat([]byte{2}, 16), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := writeConf(t, "railmq.data_encryption_key_file = "+key+"\nrailmq.data_encryption_old_key_file = "+old+"\nrailmq.data_encryption_key_rotation = 72h\n")
	o, notes, out, err := parseWith(t, map[string]string{"RAILMQ_CONFIG": conf})
	if err != nil {
		t.Fatalf("%v %v\n%s", err, notes, out)
	}
	for _, n := range notes {
		if strings.Contains(n.msg, "unknown") || strings.Contains(n.msg, "not supported") {
			t.Fatalf("config note %+v", n)
		}
	}
	if o.dataKeyFile != key || o.dataOldKeyFiles != old || o.dataKeyRotation != 72*time.Hour {
		t.Fatalf("from the config file: %q %q %v", o.dataKeyFile, o.dataOldKeyFiles, o.dataKeyRotation)
	}
	ks, err := o.dataKeys()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ks.Key, bytes.Repeat([]byte{1}, 32)) || len(ks.Old) != 1 || !bytes.Equal(ks.Old[0].Key, bytes.Repeat([]byte{2}, 16)) ||
		ks.DataKeyRotation != 72*time.Hour || ks.KeyFile != key {
		t.Fatalf("keys %+v", ks)
	}
	o, _, _, err = parseWith(t, map[string]string{"RAILMQ_DATA_ENCRYPTION_KEY_FILE": key})
	if err != nil || o.dataKeyFile != key {
		t.Fatalf("from the variable: %q %v", o.dataKeyFile, err)
	}
	// No key: no encryption, the options as before.
	o, _, _, err = parseWith(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ks, err := o.dataKeys(); ks != nil || err != nil {
		t.Fatalf("no key file: %v %v", ks, err)
	}
	missing := filepath.Join(dir, "missing")
	o.dataKeyFile = missing
	_, err = o.dataKeys()
	var r *refusal
	if !errors.As(err, &r) || !strings.Contains(err.Error(), missing) || !errors.Is(err, crypt.ErrKey) {
		t.Fatalf("missing key file: %v", err)
	}
}
