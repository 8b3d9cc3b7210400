package broker

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/msgpulse/msgpulse/internal/testenv"
)

// filled returns inboxes already holding n deliveries each (no broker: the
// picker only reads the buffers).
func filled(weights []int, counts []int) []*inbox {
	var out []*inbox
	for i, w := range weights {
		in := &inbox{share: QueueShare{Name: strconv.Itoa(i), Weight: w}, buf: make(chan amqp.Delivery, max(counts[i], 1))}
		for j := range counts[i] {
			in.buf <- amqp.Delivery{MessageId: strconv.Itoa(j)}
		}
		close(in.buf)
		out = append(out, in)
	}
	return out
}

func TestPickerSharesByWeightWhileAllHaveWork(t *testing.T) {
	for _, tc := range []struct {
		name    string
		weights []int
		counts  []int
		picks   int
		want    []int
	}{
		{"all busy 8:3:1", []int{8, 3, 1}, []int{100, 100, 100}, 12, []int{8, 3, 1}},
		{"all busy, two rounds", []int{8, 3, 1}, []int{100, 100, 100}, 24, []int{16, 6, 2}},
		{"only low busy gets every pick", []int{8, 3, 1}, []int{0, 0, 10}, 10, []int{0, 0, 10}},
		{"high and low", []int{8, 3, 1}, []int{100, 0, 100}, 9, []int{8, 0, 1}},
		{"high runs dry, the rest take over", []int{8, 3, 1}, []int{2, 100, 100}, 14, []int{2, 9, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPicker(filled(tc.weights, tc.counts))
			got := make([]int, len(tc.weights))
			for range tc.picks {
				_, in, ok := p.next()
				require.True(t, ok)
				i, _ := strconv.Atoi(in.share.Name)
				got[i]++
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestPickerLowMovesWithinOneRound(t *testing.T) {
	p := newPicker(filled([]int{8, 3, 1}, []int{100, 100, 100}))
	seen := map[string]int{}
	for range 12 {
		_, in, _ := p.next()
		seen[in.share.Name]++
		if in.share.Name == "0" {
			require.LessOrEqual(t, seen["0"], 8)
		}
	}
	require.Equal(t, 1, seen["2"], "low gets its pick in every round of 12, not after the others drain")
}

func TestPickerEndsWhenAllInboxesEnd(t *testing.T) {
	p := newPicker(filled([]int{1, 1}, []int{1, 0}))
	_, _, ok := p.next()
	require.True(t, ok)
	_, _, ok = p.next()
	require.False(t, ok)
	select {
	case in := <-p.lost:
		require.NotNil(t, in, "the first to end while another was open is reported")
	default:
		t.Fatal("an inbox that ended early was not reported")
	}
}

// One pool of workers serves several queues, each with its own handler;
// every message is handled once, by its queue's handler.
func TestConsumerServesSeveralQueues(t *testing.T) {
	e := setup(t)
	names := []string{"q.high", "q.normal", "q.low"}
	for _, n := range names {
		e.queue(t, n, nil)
	}
	var mu sync.Mutex
	handled := map[string]string{}
	handler := func(queue string) Handler {
		return func(_ context.Context, d *amqp.Delivery) Action {
			mu.Lock()
			defer mu.Unlock()
			require.Empty(t, handled[string(d.Body)], "handled twice: %s", d.Body)
			handled[string(d.Body)] = queue
			return Ack
		}
	}
	var shares []QueueShare
	for i, n := range names {
		shares = append(shares, QueueShare{Name: n, Weight: []int{8, 3, 1}[i], Prefetch: []int{16, 4, 4}[i], Handler: handler(n)})
	}
	c, err := NewConsumer(ConsumerConfig{Session: e.s, Queues: shares, Concurrency: 3, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	const per = 50
	for _, n := range names {
		for i := range per {
			require.NoError(t, e.pub.Publish(ctx, "x", n, amqp.Publishing{Body: []byte(n + "/" + strconv.Itoa(i))}))
		}
	}
	testenv.WaitFor(t, 10*time.Second, "every message handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == per*len(names)
	})
	for body, q := range handled {
		require.Contains(t, body, q+"/", "handled by its own queue's handler")
	}
	cancel()
	require.NoError(t, <-done)
	for _, n := range names {
		require.Zero(t, e.depth(t, n))
	}
}

func TestConsumerConfigQueues(t *testing.T) {
	h := func(context.Context, *amqp.Delivery) Action { return Ack }
	s := &Session{}
	for _, tc := range []struct {
		name string
		cfg  ConsumerConfig
		ok   bool
	}{
		{"queue", ConsumerConfig{Session: s, Queue: "a", Handler: h}, true},
		{"queues", ConsumerConfig{Session: s, Queues: []QueueShare{{Name: "a", Handler: h}}}, true},
		{"both", ConsumerConfig{Session: s, Queue: "a", Queues: []QueueShare{{Name: "b"}}, Handler: h}, false},
		{"neither", ConsumerConfig{Session: s, Handler: h}, false},
		{"no handler", ConsumerConfig{Session: s, Queues: []QueueShare{{Name: "a"}}}, false},
		{"bad weight", ConsumerConfig{Session: s, Queues: []QueueShare{{Name: "a", Weight: -1}}, Handler: h}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.ok {
				require.NoError(t, err)
				require.NoError(t, tc.cfg.Validate(), "validating twice changes nothing")
				require.Len(t, tc.cfg.Queues, 1)
			} else {
				require.Error(t, err)
			}
		})
	}
}
