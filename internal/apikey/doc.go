// Package apikey is who may call the API: the keys from API_KEYS, each with
// a name, a tenant (the part of the name before "/", else "default") and
// scopes (send, read, admin), and the constant-time lookup of a presented
// key.
//
// Least privilege: an entry without scopes gets send+read (Default); admin,
// the platform operator's scope (every tenant's data, global limits, the
// console), is given only where API_KEYS writes it. A key written as
// "sha256=" in any case is a digest, and a malformed digest is an error,
// never a plaintext key.
//
// It keeps only SHA-256 digests of keys, never their plaintext, and never
// puts a key or a digest into an error: an error names the entry by its
// position and name. It imports nothing of msgpulse's.
package apikey
