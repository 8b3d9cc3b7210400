package profile

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/zap"
)

func TestServeExposesPprofAndStopsWithContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := Serve(ctx, addr, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile") {
		t.Fatalf("status %d, body %.100q", resp.StatusCode, body)
	}
	cancel()
	wait()
	if _, err := http.Get("http://" + addr + "/debug/pprof/"); err == nil {
		t.Fatal("server still answers after its context ended")
	}
}

func TestServeWithoutAddressServesNothing(t *testing.T) {
	wait, err := Serve(context.Background(), "", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	wait()
}
