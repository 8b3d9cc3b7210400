// Package breaker is a small circuit breaker, one per SMS vendor, so that a
// vendor that is down stops receiving traffic for a while instead of eating
// every message's retry budget, and so that a fallback vendor can take over.
//
// It only counts what callers report: it never decides what a failure is
// (the caller must report only failures that say the vendor is unhealthy,
// not a rejected message), never sleeps, never starts goroutines and never
// reads the clock except through the function it was given, so tests drive
// it with a fake clock. It never logs and never talks to anything.
package breaker
