// Command healthcheck GETs a URL and exits 0 on a 2xx answer, 1 otherwise.
// The container image has no shell or curl; compose health checks call
// this instead.
package main

import (
	"fmt"
	"net/http"
	"os"
	"time"
)

func main() { os.Exit(run()) }

func run() int {
	if len(os.Args) != 2 || os.Args[1] == "-h" || os.Args[1] == "--help" {
		fmt.Fprintln(os.Stderr, "usage: healthcheck URL   (exit 0 when GET URL answers 2xx)")
		return 2
	}
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(os.Args[1]) //nolint:gosec,noctx // the URL to probe is this tool's only input; the client has a timeout
	if err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		return 1
	}
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		fmt.Fprintln(os.Stderr, "healthcheck:", resp.Status)
		return 1
	}
	return 0
}
