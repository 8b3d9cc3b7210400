package bounce_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/msgpulse/msgpulse/internal/bounce"
)

// FuzzParse: whatever a mail server (or anyone who can reach port 25)
// sends, Parse returns without panicking, and what it returns is bounded.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.eml"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := bounce.Parse(bytes.NewReader(b))
		if err != nil {
			return
		}
		if len(rep.Recipients) > 50 {
			t.Fatalf("%d recipient blocks", len(rep.Recipients))
		}
		for _, r := range bounce.DSNReceipts(rep, "t1") {
			if len([]rune(r.Detail)) > 301 {
				t.Fatalf("detail of %d runes", len([]rune(r.Detail)))
			}
		}
		bounce.ARFReceipt(rep, "t1")
	})
}
