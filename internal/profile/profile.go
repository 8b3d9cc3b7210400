// Package profile serves net/http/pprof on an address of its own, so a
// production process can be profiled under real load without exposing the
// profiler on its public port. It must never be mounted on the API's
// listener: profiles reveal memory contents.
package profile

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Serve listens on addr and serves /debug/pprof/ until ctx ends. An empty
// addr serves nothing. The returned wait function blocks until the server
// has stopped.
func Serve(ctx context.Context, addr string, log *zap.Logger) (wait func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("PPROF_ADDR: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// No WriteTimeout: a CPU profile or trace streams for as long as asked.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("pprof server stopped", zap.Error(err))
		}
	}()
	go func() {
		defer wg.Done()
		<-ctx.Done()
		_ = srv.Close()
	}()
	log.Info("pprof listening", zap.String("addr", ln.Addr().String()))
	return wg.Wait, nil
}
