// Package crypt holds railmq's encryption at rest: the data encryption
// keys (--data-encryption-key-file and the old keys still read), opening
// a Badger with its own encryption (key registry, master-key rotation,
// clear errors for a wrong or missing key), and the AES-GCM formats of
// the files railmq writes itself (raft snapshots, stream chunks, page
// files). docs/encryption.md describes what is encrypted and how.
//
// A leaf: it imports the standard library and Badger only, and knows
// nothing of queues, streams or raft.
package crypt
