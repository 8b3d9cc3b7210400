package api

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/callback"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/egress"
	"github.com/msgpulse/msgpulse/internal/receipt/applier"
	"github.com/msgpulse/msgpulse/internal/receipt/smshook"
	"github.com/msgpulse/msgpulse/internal/receipt/smslookup"
	"github.com/msgpulse/msgpulse/internal/seal"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/suppression"
)

// receipts is what the API runs for what comes back after sent (issue
// 45): the applier every receiver hands its receipts to, its callbacks,
// and the SMS vendors' hooks.
type receipts struct {
	applier   *applier.Applier
	callbacks *callback.Sender
	smsHooks  *smshook.Hooks // nil: no hook configured
}

// newReceipts builds them from the same settings the consumer signs its
// callbacks with, so a tenant's receipt callback is signed as its sent
// one is.
func newReceipts(cfg config.API, keys *seal.Keys, statuses *status.Store, suppressions *suppression.Store, rc redis.UniversalClient,
	reg prometheus.Registerer, log *zap.Logger) (*receipts, error) {
	results := callback.NewResults()
	reg.MustRegister(results)
	cbs, err := callback.New(callback.Config{Keys: cfg.CallbackKeys, Results: results, Logger: log.Named("callback"),
		Egress: egress.Policy{AllowPrivate: cfg.CallbackPrivate}})
	if err != nil {
		return nil, err
	}
	metrics := applier.NewMetrics(reg)
	tenants := []string{apikey.DefaultTenant}
	for _, k := range cfg.APIKeys {
		tenants = append(tenants, k.Tenant)
	}
	metrics.Zero(tenants)
	a, err := applier.New(applier.Config{Status: statuses, Keys: keys, Callbacks: cbs, Suppressor: suppressions,
		Metrics: metrics, Logger: log.Named("receipt")})
	if err != nil {
		cbs.Close(context.Background())
		return nil, err
	}
	r := &receipts{applier: a, callbacks: cbs}
	r2 := cfg.Receipts
	if hc := (smshook.Config{PublicBaseURL: r2.PublicBaseURL, TwilioAuthToken: r2.TwilioAuthToken, AliyunToken: r2.AliyunToken, TencentToken: r2.TencentToken}); hc.On() {
		if r.smsHooks, err = smshook.New(hc, a, smslookup.New(rc, cfg.RedisPrefix), log.Named("smshook")); err != nil {
			cbs.Close(context.Background())
			return nil, err
		}
	}
	return r, nil
}

// close flushes the callbacks still queued, for at most 10 s.
func (r *receipts) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.callbacks.Close(ctx)
}
