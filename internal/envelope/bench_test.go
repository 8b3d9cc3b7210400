package envelope

import (
	"testing"
	"time"
)

func BenchmarkEncodeDecode(b *testing.B) {
	d := time.Now().Add(10 * time.Minute)
	m := &Message{Version: SchemaVersion, TaskID: "01a1fcd2-99e4-7efe-8f4d-830522746773", Kind: Verification, Channel: "mail",
		Recipient: "alice@example.com", Template: "verify_code", Variables: map[string]string{"ttlMinutes": "10"}, Purpose: "login",
		SealedCode: "v1.abcdefghijklmnopqrstuvwxyz0123456789", CodeDigest: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		Deadline: &d, CreatedAt: time.Now()}
	b.ReportAllocs()
	for b.Loop() {
		body, err := Encode(m)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Decode(body); err != nil {
			b.Fatal(err)
		}
	}
}
