// Package docs keeps the repository's markdown honest: README.md,
// SECURITY.md, BENCHMARKS.md and docs/*.md link to each other and to the
// code by relative paths and #anchors, and moving a section (README's
// reference went to docs/ in issue 44) silently breaks them. Its test,
// part of `go test ./...` and so of `make test`, resolves every such link.
//
// It reads markdown the way GitHub renders it, as far as links need: code
// fences and code spans hold no links, and a heading's anchor is its text
// lowercased, punctuation removed, spaces turned to '-', with -1, -2, ...
// added to repeats. It is not a markdown parser and imports nothing of
// msgpulse; no program uses it.
package docs
