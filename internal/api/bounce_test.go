package api

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/msgpulse/msgpulse/internal/bounce"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/receipt"
)

type nopApplier struct{}

func (nopApplier) Apply(context.Context, receipt.Receipt) error { return nil }

// BOUNCE_SMTP_ADDR without an Applier is refused at start, never a
// receiver that answers 250 and stores nothing.
func TestStartBounce(t *testing.T) {
	t.Parallel()
	on := config.API{Receipts: config.Receipts{BounceSMTPAddr: "127.0.0.1:0", BounceDomain: "bounce.h45b.test", Secret: strings.Repeat("s", 32)}}
	for _, tc := range []struct {
		name    string
		cfg     config.API
		applier receipt.Applier
		running bool
		err     error
	}{
		{name: "off", cfg: config.API{}, applier: nil},
		{name: "no applier", cfg: on, applier: nil, err: bounce.ErrNoApplier},
		{name: "on", cfg: on, applier: nopApplier{}, running: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			log := zaptest.NewLogger(t)
			srv, err := startBounce(tc.cfg, tc.applier, log)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				require.Contains(t, err.Error(), "BOUNCE_SMTP_ADDR")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.running, srv != nil)
			closeBounce(context.Background(), 5*time.Second, srv, log)
		})
	}
}
