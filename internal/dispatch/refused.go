package dispatch

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/receipt"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// ClassRefused labels a send the provider refused for a reason that is a
// receipt in itself (receipt.RefusedError): a 550 5.1.1, Twilio's 21610.
const ClassRefused = "refused"

// refused handles a provider's refusal that is a receipt (SMTP 550 5.1.1:
// no such mailbox; Twilio 21610: the number opted out). No later attempt
// can succeed and nothing needs fixing on call, so the message is acked,
// neither retried nor dead-lettered, and the receipt goes to the applier:
// the status becomes bounced or undelivered, the tenant's callback says
// so, and the recipient is suppressed. Without an applier, or when it
// could not apply it, the record says failed with the refusal.
func (d *Dispatcher) refused(ctx context.Context, j *job, log *zap.Logger, re *receipt.RefusedError) broker.Action {
	d.cfg.Metrics.Skipped.WithLabelValues(j.channel, string(j.level), ClassRefused).Inc()
	r := re.Receipt
	if d.cfg.Receipts != nil && len(j.msg.Recipients) == 0 {
		r.TaskID, r.Recipient = j.msg.TaskID, j.msg.Recipient
		if names, ok := topology.ByQueue(j.channel, j.msg.Robot); ok && r.Channel == "" {
			r.Channel = names.API
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err := d.cfg.Receipts.Apply(actx, r)
		cancel()
		if err == nil {
			log.Info("refused by the provider; applied as a receipt", zap.String("kind", string(r.Kind)), zap.String("code", r.Code), zap.Error(re))
			return broker.Ack
		}
		if !errors.Is(err, receipt.ErrUnknownMessage) {
			log.Warn("refused by the provider, and its receipt could not be applied; recording failed", zap.Error(err))
		}
	}
	d.final(ctx, j, status.Update{Status: status.Failed, Reason: ptr(status.ReasonRefused), ErrorClass: ptr(ClassRefused), LastError: ptr(re.Error())})
	log.Warn("refused by the provider for good; acked, not retried", zap.String("kind", string(r.Kind)), zap.String("code", r.Code), zap.Error(re))
	return broker.Ack
}
