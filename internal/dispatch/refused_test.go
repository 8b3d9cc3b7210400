package dispatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/dispatch/dispatchtest"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/receipt"
	"github.com/msgpulse/msgpulse/internal/receipt/applier"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/suppression"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// optedOut refuses every SMS as Twilio refuses a number that opted out
// (21610): a refusal that is a receipt, the kind of error the SMS
// providers return for it.
type optedOut struct{ calls atomic.Int32 }

func (o *optedOut) Name() string { return "twilio" }

func (o *optedOut) SendSMS(context.Context, provider.SMS) (provider.Receipt, error) {
	o.calls.Add(1)
	return provider.Receipt{}, &receipt.RefusedError{
		Receipt: receipt.Receipt{Channel: "sms", Kind: receipt.Undelivered, Code: "21610", Detail: "Attempt to send to unsubscribed recipient", Source: "twilio", Suppress: receipt.SuppressOptOut},
		Err:     &provider.Error{Class: provider.Permanent, Provider: "twilio", Code: "21610", Err: errors.New("Attempt to send to unsubscribed recipient")},
	}
}

// entries is a suppression list of the test's own (the suppression
// package's store is another engineer's).
type entries struct {
	mu  sync.Mutex
	all []suppression.Entry
}

func (e *entries) Add(_ context.Context, en suppression.Entry) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, en)
	return nil
}

func (e *entries) list() []suppression.Entry {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]suppression.Entry(nil), e.all...)
}

// A send the provider refuses with a receipt (receipt.RefusedError) is
// acked, neither retried nor dead-lettered; with an applier its receipt is
// applied (undelivered, the code named, the number suppressed for the
// message's tenant); without one the record says failed with the refusal.
func TestRefusalIsAReceipt(t *testing.T) {
	for _, withApplier := range []bool{true, false} {
		t.Run(map[bool]string{true: "applier", false: "no applier"}[withApplier], func(t *testing.T) {
			sms := &optedOut{}
			s := setup(t, dispatchtest.Options{SMS: sms})
			list := &entries{}
			if withApplier {
				a, err := applier.New(applier.Config{Status: s.Status, Keys: s.Keys, Suppressor: list})
				require.NoError(t, err)
				s.Receipts = a
			}
			s.StartConsumer("c1", 2)
			id := s.Notice(topology.SMS, "+15005550006", "hello", func(m *envelope.Message) {
				m.Tenant, m.CallbackURL = "shopA", "https://cb.example/hook?token=s3cret"
			})

			want := status.Failed
			if withApplier {
				want = status.Undelivered
			}
			rec := waitStatus(t, s, id, want)
			require.Equal(t, "https://cb.example/hook?token=s3cret", rec.CallbackURL, "written with sending, for the receipt's callback")
			require.Equal(t, status.DigestRecipient(s.Keys, "sms", "+15005550006"), rec.RecipientDigest)
			b, err := json.Marshal(rec)
			require.NoError(t, err)
			require.NotContains(t, string(b), "s3cret")
			if withApplier {
				require.Equal(t, "21610", rec.ReceiptCode)
				require.Equal(t, "twilio", rec.ReceiptSource)
				// The entry is added once the status is written.
				testenv.WaitFor(t, 10*time.Second, "the number suppressed", func() bool { return len(list.list()) > 0 })
				require.Equal(t, []suppression.Entry{{Tenant: "shopA", Channel: "sms", Recipient: "+15005550006", Reason: suppression.OptOut,
					Code: "21610", TaskID: id, At: list.list()[0].At}}, list.list())
			} else {
				require.Equal(t, status.ReasonRefused, rec.Reason)
				require.Equal(t, "refused", rec.ErrorClass)
				require.Contains(t, rec.LastError, "21610")
			}
			testenv.WaitFor(t, 10*time.Second, "acked", func() bool { return s.Depth("queue.sms") == 0 })
			require.Zero(t, s.Depth("queue.sms.dlq"), "not dead-lettered")
			require.EqualValues(t, 1, sms.calls.Load(), "not retried")
			require.Zero(t, sum(t, s.Metrics.Retried), "no retry scheduled")
			require.Zero(t, sum(t, s.Metrics.DeadLettered))
			require.Equal(t, 1.0, sum(t, s.Metrics.Skipped), "counted as refused")
		})
	}
}

// sum is the total of a counter vector's series.
func sum(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	total := 0.0
	for m := range ch {
		var pb dto.Metric
		require.NoError(t, m.Write(&pb))
		total += pb.GetCounter().GetValue()
	}
	return total
}

// vendorSMS accepts every SMS as a vendor that reports delivery does,
// answering its own message id.
type vendorSMS struct{ calls atomic.Int32 }

func (v *vendorSMS) Name() string { return "twilio" }

func (v *vendorSMS) SendSMS(context.Context, provider.SMS) (provider.Receipt, error) {
	n := v.calls.Add(1)
	return provider.Receipt{Provider: "twilio", MessageID: "SM" + strconv.Itoa(int(n))}, nil
}

// The vendor's message id of a sent SMS is kept with "sent", so that its
// delivery report, which names only that id, finds the message; the
// report then moves it on.
func TestSentSMSKeepsItsVendorID(t *testing.T) {
	s := setup(t, dispatchtest.Options{SMS: &vendorSMS{}})
	a, err := applier.New(applier.Config{Status: s.Status, Keys: s.Keys})
	require.NoError(t, err)
	s.StartConsumer("c1", 1)
	id := s.Notice(topology.SMS, "+15005550006", "hello", nil)
	waitStatus(t, s, id, status.Sent)
	got, ok, err := s.Lookup.Get(context.Background(), "twilio", "SM1")
	require.NoError(t, err)
	require.True(t, ok, "the vendor id is kept with sent")
	require.Equal(t, id, got.TaskID)
	require.Equal(t, "+15005550006", got.Recipient)
	require.NoError(t, a.Apply(context.Background(), receipt.Receipt{TaskID: got.TaskID, Channel: "sms", Kind: receipt.Delivered, Source: "twilio", Recipient: got.Recipient}))
	require.Equal(t, status.Delivered, s.StatusOf(id).Status)
	_, ok, err = s.Lookup.Get(context.Background(), "recording", "r-1")
	require.NoError(t, err)
	require.False(t, ok)
}
