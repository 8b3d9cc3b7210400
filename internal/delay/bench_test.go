package delay

import (
	"testing"
	"time"

	"github.com/msgpulse/msgpulse/internal/topology"
)

func BenchmarkPlanNext(b *testing.B) {
	m, err := topology.Build(topology.DefaultConfig(), "")
	if err != nil {
		b.Fatal(err)
	}
	p, err := NewPlanner(m.Delay, 20*time.Millisecond, 2*time.Millisecond)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p.Next(time.Duration(i%180_000)*time.Millisecond, time.Millisecond)
	}
}
