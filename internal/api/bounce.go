package api

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/bounce"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/receipt"
	"github.com/msgpulse/msgpulse/internal/receipt/verp"
)

// startBounce runs the bounce receiver (internal/bounce) when
// BOUNCE_SMTP_ADDR is set: nil without it. applier is what stores the
// receipts it reads; without one the API refuses to start, since a
// receiver that answers 250 and stores nothing loses every bounce its MTAs
// would otherwise have kept and retried.
func startBounce(cfg config.API, applier receipt.Applier, log *zap.Logger) (*bounce.Server, error) {
	r := cfg.Receipts
	if r.BounceSMTPAddr == "" {
		return nil, nil
	}
	if applier == nil {
		return nil, fmt.Errorf("BOUNCE_SMTP_ADDR: %w", bounce.ErrNoApplier)
	}
	signer, err := verp.New(r.Secret, r.BounceDomain)
	if err != nil {
		return nil, fmt.Errorf("MAIL_BOUNCE_DOMAIN: %w", err)
	}
	return bounce.New(bounce.Config{Addr: r.BounceSMTPAddr, Signer: signer, Applier: applier, Log: log.Named("bounce")})
}

// closeBounce stops the receiver within timeout (SHUTDOWN_TIMEOUT): mails
// being applied finish and get their answer; the rest are retried by their
// MTAs.
func closeBounce(ctx context.Context, timeout time.Duration, srv *bounce.Server, log *zap.Logger) {
	if srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if err := srv.Close(ctx); err != nil {
		log.Warn("bounce receiver: close", zap.Error(err))
	}
}
