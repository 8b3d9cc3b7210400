package mailcatcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// RunConfig is what cmd/mailcatcher runs.
type RunConfig struct {
	Catcher  Config
	HTTPAddr string // web view; port 0 picks a free port
	// Out receives one block per accepted message: it stands in for the
	// recipient's inbox, so it shows the text body.
	Out io.Writer
	// Ready, if set, is called once both listeners are up (tests use it to
	// learn the addresses).
	Ready func(smtpAddr, webURL string)
}

// Run serves SMTP and the web view until ctx ends, then shuts both down
// and returns once every goroutine it started has stopped.
func Run(ctx context.Context, rc RunConfig, log *zap.Logger) error {
	if rc.Out == nil {
		rc.Out = io.Discard
	}
	hl, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", rc.HTTPAddr)
	if err != nil {
		return fmt.Errorf("mailcatcher: web listen on %s: %w", rc.HTTPAddr, err)
	}
	webURL := "http://" + browsable(hl.Addr())

	var outMu sync.Mutex
	cfg := rc.Catcher
	cfg.OnMessage = func(m Message) {
		block := formatMessage(m, fmt.Sprintf("%s/messages/%d", webURL, m.ID))
		outMu.Lock()
		defer outMu.Unlock()
		_, _ = io.WriteString(rc.Out, block)
	}
	srv, err := New(cfg)
	if err != nil {
		_ = hl.Close()
		return err
	}
	defer func() { _ = srv.Close() }()

	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	httpErr := make(chan error, 1)
	go func() { httpErr <- hs.Serve(hl) }()

	log.Info("mail catcher ready", zap.String("smtp", srv.Addr()), zap.String("web", webURL))
	if rc.Ready != nil {
		rc.Ready(srv.Addr(), webURL)
	}

	select {
	case <-ctx.Done():
	case err := <-httpErr:
		return fmt.Errorf("mailcatcher: web server: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close()
	}
	if err := <-httpErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("mailcatcher: web server: %w", err)
	}
	return srv.Close()
}

// browsable turns a listen address into one a browser can open: a wildcard
// host becomes localhost.
func browsable(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}

func formatMessage(m Message, url string) string {
	var b strings.Builder
	rule := strings.Repeat("─", 60)
	fmt.Fprintf(&b, "──── mail #%d %s\n", m.ID, strings.Repeat("─", 46))
	fmt.Fprintf(&b, "To:      %s\n", strings.Join(m.To, ", "))
	fmt.Fprintf(&b, "Subject: %s\n", m.Subject)
	fmt.Fprintf(&b, "View:    %s\n\n", url)
	switch {
	case strings.TrimSpace(m.Text) != "":
		b.WriteString(strings.TrimRight(m.Text, "\r\n\t "))
		b.WriteString("\n")
	case m.HTML != "":
		b.WriteString("(HTML only: open the link above)\n")
	default:
		b.WriteString("(empty body)\n")
	}
	b.WriteString(rule + "\n")
	return b.String()
}
