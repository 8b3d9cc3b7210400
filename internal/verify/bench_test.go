package verify

import (
	"testing"

	"github.com/msgpulse/msgpulse/internal/seal"
)

// The CPU a code request spends on the code itself: drawing it and keying
// its digest (the part of the API's hot path that is not I/O).
func BenchmarkGenerateAndDigest(b *testing.B) {
	keys, err := seal.New(seal.DevSecret)
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(nil, keys, Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		code, err := s.Generate()
		if err != nil {
			b.Fatal(err)
		}
		_ = s.Digest("shop", "email", "user@example.com", "login", code)
	}
}

func BenchmarkGenerate(b *testing.B) {
	s, err := New(nil, nil, Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Generate(); err != nil {
			b.Fatal(err)
		}
	}
}
