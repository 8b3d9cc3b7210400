// Package client is a small typed Go client for msgpulse's HTTP API (the
// contract is api/openapi.yaml): request and verify one-time codes, send
// templated messages and read their status, manage rate-limit
// configurations, read queue and dead-letter statistics, and check
// readiness. VerifyCallback checks a status callback's signature and age
// on the receiving side.
//
// Every method takes a context and makes exactly one HTTP request. A non-2xx
// answer is returned as an *APIError carrying the status, the server's msg
// and, on 429, the Retry-After delay; IsRateLimited and IsNotFound test for
// the common cases.
//
// Its core, internal/oapi, is generated from api/openapi.yaml by
// oapi-codegen (`make docs`; a test fails when it is stale): it builds each
// request, its path, parameters and headers, from the contract. The types
// and functions here are written by hand around it, so that callers keep
// plain field names and one error type, and a test holds each type to its
// schema's fields. Besides the standard library it imports only that core's
// runtime (github.com/oapi-codegen/runtime).
//
// It never retries (the caller knows whether a repeat is safe: requesting a
// code twice sends two codes), never follows redirects (they would carry the
// API key to wherever they point), never logs, and never sends the API key
// to the routes that need none (/readyz).
package client
