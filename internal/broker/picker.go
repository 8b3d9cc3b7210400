package broker

import (
	"reflect"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// An inbox holds one queue's prefetched deliveries for a Consumer's
// workers. Its buffer is as large as the queue's prefetch, so the pump
// that fills it never waits: the broker sends no more than that unacked.
type inbox struct {
	share QueueShare
	tag   string
	buf   chan amqp.Delivery

	ch      *amqp.Channel // the queue's own channel
	acks    *acker        // settles on ch
	watched chan struct{} // closed once ch's close notification was drained
}

func startInbox(q QueueShare, tag string, deliveries <-chan amqp.Delivery) *inbox {
	in := &inbox{share: q, tag: tag, buf: make(chan amqp.Delivery, q.Prefetch)}
	go func() { // ends when the library closes deliveries (cancel or channel close)
		defer close(in.buf)
		for d := range deliveries {
			in.buf <- d
		}
	}()
	return in
}

// picker chooses the inbox each worker takes its next delivery from:
// among the inboxes with a delivery waiting, by smooth weighted round
// robin (nginx's), so that with high, normal and low all busy at 8:3:1,
// high gets 8 of every 12 picks, spread out rather than in runs, and low
// still moves; an inbox alone with work gets every pick. With nothing
// waiting a worker takes whatever arrives first.
type picker struct {
	mu      sync.Mutex
	inboxes []*inbox
	open    []bool
	current []int
	// lost reports an inbox whose deliveries ended while others had not:
	// a subscription the broker cancelled, which the consumer must notice
	// instead of serving the other queues on for ever.
	lost chan *inbox
}

func newPicker(inboxes []*inbox) *picker {
	p := &picker{inboxes: inboxes, open: make([]bool, len(inboxes)), current: make([]int, len(inboxes)), lost: make(chan *inbox, len(inboxes))}
	for i := range p.open {
		p.open[i] = true
	}
	return p
}

// next returns the next delivery and its inbox; false once every inbox
// has ended and is empty.
func (p *picker) next() (amqp.Delivery, *inbox, bool) {
	for {
		p.mu.Lock()
		if i := p.choose(); i >= 0 {
			select {
			case d, ok := <-p.inboxes[i].buf:
				if ok {
					p.mu.Unlock()
					return d, p.inboxes[i], true
				}
				p.closed(i)
			default: // another worker, waiting below, took it first
			}
			p.mu.Unlock()
			continue
		}
		cases := make([]reflect.SelectCase, 0, len(p.inboxes))
		idx := make([]int, 0, len(p.inboxes))
		for i, in := range p.inboxes {
			if p.open[i] {
				cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(in.buf)})
				idx = append(idx, i)
			}
		}
		p.mu.Unlock()
		if len(cases) == 0 {
			return amqp.Delivery{}, nil, false
		}
		chosen, v, ok := reflect.Select(cases)
		i := idx[chosen]
		if ok {
			return v.Interface().(amqp.Delivery), p.inboxes[i], true //nolint:forcetypeassert // buf carries only deliveries
		}
		p.mu.Lock()
		p.closed(i)
		p.mu.Unlock()
	}
}

// choose is one step of smooth weighted round robin over the inboxes with
// a delivery waiting; -1 when none has. Callers hold mu.
func (p *picker) choose() int {
	best, total := -1, 0
	for i, in := range p.inboxes {
		if !p.open[i] || len(in.buf) == 0 {
			continue
		}
		p.current[i] += in.share.Weight
		total += in.share.Weight
		if best < 0 || p.current[i] > p.current[best] {
			best = i
		}
	}
	if best >= 0 {
		p.current[best] -= total
	}
	return best
}

// closed marks inbox i as ended; the first to end while others are open
// is reported on lost. Callers hold mu.
func (p *picker) closed(i int) {
	if !p.open[i] {
		return
	}
	p.open[i] = false
	for _, o := range p.open {
		if o {
			select {
			case p.lost <- p.inboxes[i]:
			default:
			}
			return
		}
	}
}
