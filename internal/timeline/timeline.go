// Package timeline keeps the last two hours of the consumers' sends,
// failures and delay accuracy in Redis, one hash per minute, so the API's
// console can chart them without Prometheus or any other service.
//
// A Sampler in each consumer reads the consumer's own metrics every few
// seconds and adds what changed to the current minute's hash (HINCRBY, so
// any number of consumers add up); a Reader turns the last hour's hashes
// into points. The delay histogram's buckets are added the same way, so
// the p99 is computed over every consumer's deliveries.
//
// It must never slow a send: the Sampler touches no hot path (it reads
// counters the consumer keeps anyway), and a Redis failure costs one
// sample, logged, never a message.
package timeline

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Keep is how long a minute's hash lives.
const Keep = 2 * time.Hour

// key is one minute's hash. The braces make the minute a hash tag, so a
// minute's fields stay together on one node of a cluster.
func key(prefix string, minute time.Time) string {
	return prefix + "timeline:{" + strconv.FormatInt(minute.UTC().Truncate(time.Minute).Unix(), 10) + "}"
}

const (
	fieldSent   = "sent"
	fieldFailed = "failed"
	bucketPfx   = "le:" // le:<upper bound in seconds> = deliveries in that delay bucket
)

// Sources are the consumer's metrics the Sampler reads.
type Sources struct {
	Sent     prometheus.Collector // counters summed over their labels
	Failed   prometheus.Collector // dead-lettered, summed over labels
	Accuracy prometheus.Histogram // delivered − due, seconds
}

// Sampler adds the consumer's metric deltas to Redis.
type Sampler struct {
	rdb    redis.UniversalClient
	prefix string
	every  time.Duration
	log    *zap.Logger
	// One registry per source: gathering one reads exactly that metric.
	sent, failed, accuracy *prometheus.Registry
	now                    func() time.Time

	mu   sync.Mutex
	prev snapshot
}

// snapshot is the metrics' totals at one sample.
type snapshot struct {
	sent, failed float64
	buckets      map[string]float64 // cumulative counts by upper bound
}

// NewSampler samples src every `every` (default 10s).
func NewSampler(rdb redis.UniversalClient, prefix string, src Sources, every time.Duration, log *zap.Logger) (*Sampler, error) {
	if every <= 0 {
		every = 10 * time.Second
	}
	if log == nil {
		log = zap.NewNop()
	}
	regs := make([]*prometheus.Registry, 3)
	for i, c := range []prometheus.Collector{src.Sent, src.Failed, src.Accuracy} {
		regs[i] = prometheus.NewRegistry()
		if err := regs[i].Register(c); err != nil {
			return nil, fmt.Errorf("timeline: %w", err)
		}
	}
	s := &Sampler{rdb: rdb, prefix: prefix, every: every, log: log, sent: regs[0], failed: regs[1], accuracy: regs[2], now: time.Now}
	s.prev = s.read() // what happened before the sampler started is not this minute's
	return s, nil
}

// Run samples until ctx ends, then once more so the last seconds count.
func (s *Sampler) Run(ctx context.Context) {
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = s.Flush(fctx)
			cancel()
			return
		case <-t.C:
			if err := s.Flush(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("timeline sample not written", zap.Error(err))
			}
		}
	}
}

func (s *Sampler) read() snapshot {
	snap := snapshot{sent: counterSum(s.sent), failed: counterSum(s.failed), buckets: map[string]float64{}}
	mfs, _ := s.accuracy.Gather() // a gather error leaves what it could read
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			for _, b := range h.GetBucket() {
				if math.IsInf(b.GetUpperBound(), 1) {
					continue // counted below, as every sample
				}
				snap.buckets[strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)] += float64(b.GetCumulativeCount())
			}
			snap.buckets["+Inf"] += float64(h.GetSampleCount())
		}
	}
	return snap
}

// counterSum adds a counter's values over all its labels.
func counterSum(reg *prometheus.Registry) float64 {
	mfs, _ := reg.Gather()
	sum := 0.0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// Flush writes what changed since the last sample into the current
// minute. A failed write is retried with the next sample (the deltas are
// kept), so a short Redis outage loses nothing but its timing.
func (s *Sampler) Flush(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.read()
	k := key(s.prefix, s.now())
	pipe := s.rdb.TxPipeline()
	n := 0
	if d := int64(cur.sent - s.prev.sent); d > 0 {
		pipe.HIncrBy(ctx, k, fieldSent, d)
		n++
	}
	if d := int64(cur.failed - s.prev.failed); d > 0 {
		pipe.HIncrBy(ctx, k, fieldFailed, d)
		n++
	}
	for le, c := range cur.buckets {
		if d := int64(c - s.prev.buckets[le]); d > 0 {
			pipe.HIncrBy(ctx, k, bucketPfx+le, d)
			n++
		}
	}
	if n == 0 {
		return nil
	}
	pipe.Expire(ctx, k, Keep)
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	s.prev = cur
	return nil
}

// Point is one minute: messages sent and failed (dead-lettered), and the
// p99 of delivered − due for the delayed or scheduled messages delivered
// in it.
type Point struct {
	At       time.Time
	Sent     int64
	Failed   int64
	DelayP99 time.Duration
	HasDelay bool // some message of this minute had a due time
}

// Reader reads the last hour for the console.
type Reader struct {
	rdb    redis.UniversalClient
	prefix string
}

// NewReader reads the hashes the Samplers under prefix write.
func NewReader(rdb redis.UniversalClient, prefix string) *Reader {
	return &Reader{rdb: rdb, prefix: prefix}
}

// LastHour returns the 60 minutes up to now's minute, oldest first.
func (r *Reader) LastHour(ctx context.Context, now time.Time) ([]Point, error) {
	top := now.UTC().Truncate(time.Minute)
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, 60)
	for i := range cmds {
		cmds[i] = pipe.HGetAll(ctx, key(r.prefix, top.Add(-time.Duration(59-i)*time.Minute)))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("timeline: %w", err)
	}
	out := make([]Point, 60)
	for i, c := range cmds {
		h := c.Val()
		p := Point{At: top.Add(-time.Duration(59-i) * time.Minute)}
		p.Sent, _ = strconv.ParseInt(h[fieldSent], 10, 64)
		p.Failed, _ = strconv.ParseInt(h[fieldFailed], 10, 64)
		p.DelayP99, p.HasDelay = p99(h)
		out[i] = p
	}
	return out, nil
}

// p99 is the upper bound of the bucket holding the 99th percentile of a
// minute's delays: an upper estimate, as Prometheus' histogram_quantile
// would interpolate inside it.
func p99(h map[string]string) (time.Duration, bool) {
	type bucket struct {
		le float64
		n  int64
	}
	var bs []bucket
	for f, v := range h {
		le, ok := strings.CutPrefix(f, bucketPfx)
		if !ok {
			continue
		}
		ub := math.Inf(1)
		if le != "+Inf" {
			var err error
			if ub, err = strconv.ParseFloat(le, 64); err != nil {
				continue
			}
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		bs = append(bs, bucket{ub, n})
	}
	if len(bs) == 0 {
		return 0, false
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	total := bs[len(bs)-1].n // +Inf holds them all
	if total == 0 {
		return 0, false
	}
	want := int64(math.Ceil(0.99 * float64(total)))
	prev := 0.0
	for _, b := range bs {
		if b.n >= want {
			if math.IsInf(b.le, 1) {
				return time.Duration(prev * float64(time.Second)), true // beyond the last bound: at least that
			}
			return time.Duration(b.le * float64(time.Second)), true
		}
		prev = b.le
	}
	return 0, false
}
