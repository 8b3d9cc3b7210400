package broker

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgpulse/msgpulse/internal/testenv"
)

func benchPublisher(b *testing.B) (*Publisher, func()) {
	b.Helper()
	tb := testenv.NewBroker(b)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := NewSession(Config{URL: tb.URL})
	if err != nil {
		b.Fatal(err)
	}
	go s.Run(ctx)
	conn, err := s.Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	ch, _ := conn.Channel()
	_ = ch.ExchangeDeclare("x", "direct", false, false, false, false, nil)
	_, _ = ch.QueueDeclare("q", true, false, false, false, testenv.QueueArgs(amqp.Table{"x-max-length": int64(1000)}))
	_ = ch.QueueBind("q", "q", "x", false, nil)
	p, err := NewPublisher(PublisherConfig{Session: s, ConfirmTimeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	return p, func() { p.Close(); cancel() }
}

// One confirmed publish at a time: the round trip an API request pays.
func BenchmarkPublishConfirmed(b *testing.B) {
	p, done := benchPublisher(b)
	defer done()
	ctx := context.Background()
	msg := amqp.Publishing{DeliveryMode: amqp.Persistent, Body: make([]byte, 512)}
	for b.Loop() {
		if err := p.Publish(ctx, "x", "q", msg); err != nil {
			b.Fatal(err)
		}
	}
}

// 100 confirmed publishes pipelined on one channel, per op: what the relay
// and PublishDelayedBatch pay per message.
func BenchmarkPublishBatch100(b *testing.B) {
	p, done := benchPublisher(b)
	defer done()
	ctx := context.Background()
	batch := make([]Outgoing, 100)
	for i := range batch {
		batch[i] = Outgoing{Exchange: "x", RoutingKey: "q", Msg: amqp.Publishing{MessageId: string(rune('a' + i%26)), DeliveryMode: amqp.Persistent, Body: make([]byte, 512)}}
	}
	for b.Loop() {
		for _, err := range p.PublishBatch(ctx, batch) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/msg")
}

// BenchmarkGaugeAdmit is what admission adds to a publish: no round trip,
// a map lookup and a few atomic operations.
func BenchmarkGaugeAdmit(b *testing.B) {
	s, err := NewSession(Config{URL: "amqp://guest:guest@127.0.0.1:5672/"})
	if err != nil {
		b.Fatal(err)
	}
	g, err := NewGauge(GaugeConfig{Session: s, Queues: []string{"q"}})
	if err != nil {
		b.Fatal(err)
	}
	g.queues["q"].reading.Store(&reading{depth: 10, at: time.Now().Add(time.Hour)})
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			t, _, ok := g.Admit("q", 1<<30)
			if !ok {
				b.Fatal("refused")
			}
			t.Done(true)
		}
	})
}
