// Package main is a fixture for TestFlagScannerFindsEveryForm: every way
// a program can define a flag. It is never built.
package main

import (
	"flag"
	"os"
)

type cli struct{ fs *flag.FlagSet }

func register(fs *flag.FlagSet, prefix string) {
	var k string
	fs.StringVar(&k, "param-api-key", os.Getenv("KEY"), "a secret on the command line")
	fs.String(prefix+"token", "", "a name built at run time")
	fs.Int("prefix-"+"rate", 0, "a name built from literals")
}

func main() {
	_ = flag.Bool("global", false, "")
	local := flag.NewFlagSet("x", flag.ContinueOnError)
	_ = local.Bool("local", false, "")
	c := cli{fs: local}
	_ = c.fs.Duration("field", 0, "")
	register(local, "p-")
}
