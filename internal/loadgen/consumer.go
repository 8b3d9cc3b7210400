package loadgen

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/dispatch"
	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/mailcatcher"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// ConsumerOptions shape the throughput run.
type ConsumerOptions struct {
	Messages    int
	Concurrency int
	Rounds      int
}

// noop is a provider that accepts every message at once: the consumer's
// own cost (claim, status, render, ack) is all that remains.
type noop struct{ n atomic.Int64 }

func (p *noop) Name() string { return "noop" }
func (p *noop) SendSMS(context.Context, provider.SMS) (provider.Receipt, error) {
	p.n.Add(1)
	return provider.Receipt{Provider: "noop"}, nil
}

// Consumer measures how many messages per second one consumer process
// sends: through a no-op provider (SMS channel), and through a real SMTP
// server on loopback (mail channel).
func Consumer(ctx context.Context, o Options, c ConsumerOptions, out io.Writer) error {
	fmt.Fprintf(out, "Consumer throughput: %d messages prefilled, CONCURRENCY=%d, one consumer process\n", c.Messages, c.Concurrency)
	var noopRates, smtpRates []float64
	for r := 1; r <= c.Rounds; r++ {
		rate, err := consumeRound(ctx, o, c, topology.SMS)
		if err != nil {
			return err
		}
		noopRates = append(noopRates, rate)
		rate2, err := consumeRound(ctx, o, c, topology.Mail)
		if err != nil {
			return err
		}
		smtpRates = append(smtpRates, rate2)
		fmt.Fprintf(out, "  round %d  no-op provider %.0f msg/s   SMTP (mailcatcher on loopback) %.0f msg/s\n", r, rate, rate2)
	}
	mn, ms := median(noopRates), median(smtpRates)
	fmt.Fprintf(out, "  median of %d rounds: no-op %.0f msg/s, SMTP %.0f msg/s (%.2fx of no-op)\n", c.Rounds, mn, ms, ms/mn)
	return nil
}

func consumeRound(ctx context.Context, o Options, c ConsumerOptions, channel string) (float64, error) {
	env, err := NewEnv(ctx, o, "consumer")
	if err != nil {
		return 0, err
	}
	defer env.Close()
	model := benchTopology()
	if err := declare(ctx, env, model); err != nil {
		return 0, err
	}
	catcher, err := mailcatcher.New(mailcatcher.Config{SMTPAddr: "127.0.0.1:0", Max: c.Messages + 10})
	if err != nil {
		return 0, err
	}
	defer func() { _ = catcher.Close() }()
	host, port, _ := net.SplitHostPort(catcher.Addr())
	if err := prefill(ctx, env, channel, c.Messages); err != nil {
		return 0, err
	}
	cfg, l := config.LoadConsumer(envconf.FromMap(map[string]string{
		"AMQP_URL": env.AMQPURL, "REDIS_URL": env.RedisURL, "REDIS_PREFIX": env.Prefix, "CHANNELS": channel,
		"CONCURRENCY": fmt.Sprint(c.Concurrency), "METRICS_ADDR": "off", "RELAY": "off",
		"SMTP_HOST": host, "SMTP_PORT": port, "SMTP_POOL_SIZE": fmt.Sprint(c.Concurrency),
		"MAIL_QUEUE_TTL": "0s", "MAIL_QUEUE_MAX_LENGTH": "0", "SMS_QUEUE_TTL": "0s", "SMS_QUEUE_MAX_LENGTH": "0",
	}))
	if err := l.Err(); err != nil {
		return 0, err
	}
	p := &noop{}
	sent := func() int {
		if channel == topology.SMS {
			return int(p.n.Load())
		}
		return catcher.Count()
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := make(chan time.Time, 1)
	done := make(chan error, 1)
	go func() {
		done <- dispatch.Run(cctx, cfg, zap.NewNop(), dispatch.WithSMS(p), dispatch.WithReady(func() { started <- time.Now() }))
	}()
	var t0 time.Time
	select {
	case t0 = <-started:
	case err := <-done:
		return 0, err
	}
	for sent() < c.Messages {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case err := <-done:
			return 0, fmt.Errorf("consumer stopped: %w", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	elapsed := time.Since(t0)
	cancel()
	if err := <-done; err != nil {
		return 0, fmt.Errorf("consumer stopped with: %w", err)
	}
	return float64(c.Messages) / elapsed.Seconds(), nil
}

// prefill publishes n notices to a channel's queue, pipelined in batches.
func prefill(ctx context.Context, env *Env, channel string, n int) error {
	m, err := topology.Build(benchTopology(), "")
	if err != nil {
		return err
	}
	ct, err := m.Channel(channel)
	if err != nil {
		return err
	}
	s, err := broker.NewSession(broker.Config{URL: env.AMQPURL})
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.Run(sctx)
	if _, err := s.Conn(ctx); err != nil {
		return err
	}
	pub, err := broker.NewPublisher(broker.PublisherConfig{Session: s})
	if err != nil {
		return err
	}
	defer pub.Close()
	rcpt := func(i int) string {
		if channel == topology.SMS {
			return fmt.Sprintf("+86139%08d", i)
		}
		return fmt.Sprintf("user%d@example.com", i)
	}
	for from := 0; from < n; from += 500 {
		var batch []broker.Outgoing
		for i := from; i < min(from+500, n); i++ {
			msg := &envelope.Message{Version: envelope.SchemaVersion, TaskID: fmt.Sprintf("lg-%s-%d", randomID(), i), Kind: envelope.Notification,
				Channel: channel, Recipient: rcpt(i), Template: "notice", Variables: map[string]string{"title": "t", "content": "c"}, CreatedAt: time.Now()}
			p, err := envelope.Publishing(msg)
			if err != nil {
				return err
			}
			batch = append(batch, broker.Outgoing{Exchange: ct.Exchange, RoutingKey: ct.RoutingKey, Msg: p})
		}
		for _, err := range pub.PublishBatch(ctx, batch) {
			if err != nil {
				return fmt.Errorf("prefill: %w", err)
			}
		}
	}
	return nil
}
