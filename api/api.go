// Package api holds msgpulse's HTTP contract: the OpenAPI 3 document of every
// route cmd/api serves, embedded so that the server can publish it at
// GET /openapi.yaml and tests can compare the routes the server registers
// with the routes the document describes.
//
// The document is the contract, written by hand; nothing generates it and
// nothing is generated from it. The package holds no code that serves,
// validates or routes requests: that is cmd/api's job, and keeping this
// package data-only lets the server, the client's tests and tools import it
// without pulling in anything else.
//
// Two packages are named api, on purpose: this one is the contract, in
// the api/ folder where a Go module's API description conventionally
// lives, and internal/api is the server that keeps it, named after
// cmd/api as every program's package is. They meet in one file,
// internal/api/server.go, which imports this one as apidoc.
package api

import _ "embed" // for go:embed

// OpenAPI is the OpenAPI 3 document (YAML) of msgpulse's HTTP API. Treat it
// as read-only: it is shared by every importer.
//
//go:embed openapi.yaml
var OpenAPI []byte
