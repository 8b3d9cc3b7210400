package envelope

import (
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// fastPathBodies are bodies the fast path must take (and the forms around
// it that it must leave to encoding/json): seeds for the fuzzer below.
var fastPathBodies = []string{
	`{"v":1,"taskId":"a","kind":"notification","channel":"wecom","recipients":[],"mentions":[],"variables":{},"template":"t","createdAt":"2026-01-01T00:00:00Z","attempt":0}`,
	` { "v" : 1 , "taskId" : "a\"\\\/\b\f\n\r\t\u00e9\u4e2d" , "kind":"verification","channel":"mail","recipient":"x","template":"t","createdAt":"2026-01-01T08:00:00.5+08:00","attempt":-0,"priority":255} ` + "\n",
	`{"v":1,"taskId":"m","kind":"notification","channel":"wecom","recipient":"u","media":{"type":"file","url":"https://x/y","filename":"a.pdf"},"robot":false,"template":"","createdAt":"2026-01-01T00:00:00Z","attempt":1}`,
	// Each of these is left to encoding/json, which then decides.
	`{"v":1,"taskId":"a","TaskID":"b","kind":"notification","channel":"mail","recipient":"x","template":"t","createdAt":"2026-01-01T00:00:00Z","attempt":0}`,
	`{"v":1,"taskId":"a","taskId":"b","kind":"notification","channel":"mail","recipient":"x","template":"t","createdAt":"2026-01-01T00:00:00Z","attempt":0}`,
	`{"v":1,"taskId":"a","kind":"notification","channel":"mail","recipient":"x","template":"t","createdAt":"2026-01-01T00:00:00Z","attempt":1e0}`,
	`{"v":1,"taskId":"a","kind":"notification","channel":"mail","recipient":"x","template":"t","createdAt":"2026-01-01T00:00:00Z","attempt":0,"media":null}`,
	`{"v":1,"taskId":"\ud83d\ude00","kind":"notification","channel":"mail","recipient":"x","template":"t","createdAt":"2026-01-01T00:00:00Z","attempt":0}`,
	`{"v":1,"taskId":"a","kind":"notification","channel":"mail","recipient":"x","template":"t","createdAt":"2026-01-01T00:00:00Z","attempt":0}}`,
	`{"v":1,"taskId":"a","kind":"notification","channel":"mail","recipient":"x","template":"t","priority":256,"createdAt":"2026-01-01T00:00:00Z","attempt":0}`,
	`{"v":1,"taskId":"a","kind":"notification","channel":"mail","recipient":"x","template":"t","createdAt":"2026-13-01T00:00:00Z","attempt":0}`,
	`{"v":01,"taskId":"a"}`,
}

// FuzzDecodeFastAgrees holds decodeFast to encoding/json: wherever it
// takes a body, encoding/json (as Decode used it before the fast path)
// takes the body too and reads the same message from it.
func FuzzDecodeFastAgrees(f *testing.F) {
	for _, b := range realMessages(f) {
		f.Add(b)
	}
	for _, s := range fastPathBodies {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !utf8.Valid(body) {
			return // Decode refuses these before either parser runs
		}
		var fast Message
		if !decodeFast(body, &fast) {
			return
		}
		var slow Message
		if err := decodeJSON(body, &slow); err != nil {
			t.Fatalf("the fast path took a body encoding/json refuses (%v):\n%s", err, body)
		}
		require.Equal(t, slow, fast, "the fast path read another message than encoding/json from:\n%s", body)
	})
}

// TestEncodedBodiesTakeTheFastPath: what Encode writes, escapes and
// nested fields included, is read by the fast path, so the consumer does
// not pay for encoding/json on the messages msgpulse itself publishes.
// Without this, a fast path that never said yes would pass every test.
func TestEncodedBodiesTakeTheFastPath(t *testing.T) {
	t.Parallel()
	for i, body := range realMessages(t)[:4] {
		var m Message
		require.True(t, decodeFast(body, &m), "body %d:\n%s", i, body)
		var want Message
		require.NoError(t, decodeJSON(body, &want))
		require.Equal(t, want, m)
	}
	for i, s := range fastPathBodies[:3] {
		var m Message
		require.True(t, decodeFast([]byte(s), &m), "seed %d: %s", i, s)
	}
	for i, s := range fastPathBodies[3:] {
		var m Message
		require.False(t, decodeFast([]byte(s), &m), "seed %d is for encoding/json: %s", i+3, s)
	}
}
