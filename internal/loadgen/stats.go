package loadgen

import (
	"fmt"
	"sort"
	"time"
)

// Summary is a latency distribution.
type Summary struct {
	N                  int
	P50, P95, P99, Max time.Duration
	Min                time.Duration
	Errors             int
	Throughput         float64 // per second, when meaningful
	Elapsed            time.Duration
}

func summarize(samples []time.Duration) Summary {
	s := Summary{N: len(samples)}
	if len(samples) == 0 {
		return s
	}
	sorted := append([]time.Duration(nil), samples...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	q := func(p float64) time.Duration {
		i := int(p*float64(len(sorted)-1) + 0.5)
		return sorted[i]
	}
	s.Min, s.P50, s.P95, s.P99, s.Max = sorted[0], q(0.50), q(0.95), q(0.99), sorted[len(sorted)-1]
	return s
}

func (s Summary) String() string {
	return fmt.Sprintf("n=%d p50=%s p95=%s p99=%s max=%s min=%s", s.N, ms(s.P50), ms(s.P95), ms(s.P99), ms(s.Max), ms(s.Min))
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
