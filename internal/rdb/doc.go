// Package rdb builds the Redis client every msgpulse program shares, from a
// redis://, rediss:// or unix:// URL, with timeouts and a pool size suited to
// a request path that must fail fast rather than queue behind a slow Redis.
//
// It never connects at construction (a program starts, and reports Redis
// problems on first use or readiness check) and never puts the URL, which
// may hold a password, into an error.
package rdb
