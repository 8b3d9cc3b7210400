// Package envconf reads typed settings from environment variables.
//
// Every program in msgpulse is configured only through its environment, so
// this package is where a bad value becomes a one-line error that names the
// variable, and where the list of variables becomes the text of -h. A
// program declares each variable once, with its default and help, by calling
// the typed getters on a Loader; the same calls therefore produce the values,
// the validation errors and the documentation, which cannot drift apart.
//
// It must never read a variable that it does not also document, and it never
// exits the process: callers decide what an error means.
package envconf
