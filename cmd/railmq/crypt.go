package main

import (
	"flag"

	"go.uber.org/zap"

	"github.com/railmq/railmq/crypt"
)

// Encryption at rest (docs/encryption.md): the flags, and the keys they
// name read at start. Every flag is also a RAILMQ_ variable
// (RAILMQ_DATA_ENCRYPTION_KEY_FILE) and a railmq.* config key
// (railmq.data_encryption_key_file).

func defineCryptFlags(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.dataKeyFile, "data-encryption-key-file", "",
		"file holding the AES key (16, 24 or 32 bytes raw, or their hex or base64 text: openssl rand -hex 32) that encrypts everything written under --data-dir; empty: no encryption (docs/encryption.md)")
	fs.StringVar(&o.dataOldKeyFiles, "data-encryption-old-key-file", "",
		"files holding keys the data may still be encrypted with, comma-separated: a rotation to --data-encryption-key-file (the store's master key is rewritten at start)")
	fs.DurationVar(&o.dataKeyRotation, "data-encryption-key-rotation", 0,
		"how often the store makes a new data key under the master key (Badger's data-key rotation); 0: 240h")
}

// dataKeys reads the key files; an error is a *refusal naming the file.
func (o *options) dataKeys() (*crypt.Keys, error) {
	ks, err := crypt.Load(o.dataKeyFile, splitList(o.dataOldKeyFiles))
	if err != nil {
		return nil, &refusal{msg: "cannot use the data encryption key", fields: []zap.Field{zap.String("file", o.dataKeyFile)}, err: err}
	}
	if ks != nil {
		if o.dataKeyRotation < 0 {
			return nil, &refusal{msg: "data-encryption-key-rotation must not be negative"}
		}
		ks.DataKeyRotation = o.dataKeyRotation
	}
	return ks, nil
}
