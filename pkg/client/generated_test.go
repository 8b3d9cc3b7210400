package client

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/msgpulse/msgpulse/pkg/client/internal/oapi"
)

// generatedCore is the file `make docs` writes from api/openapi.yaml.
const generatedCore = "internal/oapi/oapi.gen.go"

// The generated core must be what the pinned generator (go.mod's tool
// directive) makes of today's api/openapi.yaml: a contract change that
// was not followed by `make docs` fails here, in `make test`, rather than
// shipping a client that speaks the old contract.
func TestGeneratedCoreIsFresh(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the generator")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "oapi.gen.go")
	cmd := exec.Command("go", "tool", "oapi-codegen",
		"-config", "pkg/client/oapi-codegen.yaml", "-o", out, "api/openapi.yaml")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("oapi-codegen: %v\n%s", err, b)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(generatedCore)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("pkg/client/%s differs from what api/openapi.yaml generates: run `make docs`", generatedCore)
	}
}

// The exported types stay hand-written, so that callers keep their field
// names and plain (not pointer) optional fields; each must still carry
// exactly the JSON fields of the contract's schema, as the generated core
// reads it. A field added to api/openapi.yaml and not here fails.
func TestTypesCarryTheContractsFields(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ours, gen any
	}{
		{"VerificationCodeRequest", VerificationCodeRequest{}, oapi.VerificationCodeRequest{}},
		{"VerificationCode", VerificationCode{}, oapi.VerificationCode{}},
		{"VerifyRequest", VerifyRequest{}, oapi.VerifyRequest{}},
		{"VerifyResult", VerifyResult{}, oapi.VerifyResult{}},
		{"SendRequest", SendRequest{}, oapi.SendRequest{}},
		{"SendResult", SendResult{}, oapi.SendResult{}},
		{"BatchRequest", BatchRequest{}, oapi.BatchRequest{}},
		{"BatchResult", BatchResult{}, oapi.BatchResult{}},
		{"Batch", Batch{}, oapi.Batch{}},
		{"Message", Message{}, oapi.Message{}},
		{"ReceiptEvent", ReceiptEvent{}, oapi.ReceiptEvent{}},
		{"StatusCallback", StatusCallback{}, oapi.StatusCallback{}},
		{"RateLimit", RateLimit{}, oapi.RateLimit{}},
		{"QueueStats", QueueStats{}, oapi.QueueStats{}},
		{"QueueStat", QueueStat{}, oapi.QueueStat{}},
		{"WeComAccountState", WeComAccountState{}, oapi.WeComAccountState{}},
		{"WeComMedia", WeComMedia{}, oapi.WeComMedia{}},
		{"DLQStats", DLQStats{}, oapi.DLQStats{}},
		{"DLQQueueStat", DLQQueueStat{}, oapi.DLQQueueStat{}},
		{"FraudBlock", FraudBlock{}, oapi.FraudBlock{}},
		{"Suppression", Suppression{}, oapi.Suppression{}},
		{"SuppressionInput", SuppressionInput{}, oapi.SuppressionInput{}},
		{"SuppressionPage", SuppressionPage{}, oapi.SuppressionPage{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ours, gen := jsonFields(reflect.TypeOf(tc.ours)), jsonFields(reflect.TypeOf(tc.gen))
			if !slices.Equal(ours, gen) {
				t.Fatalf("JSON fields differ from the contract's\n ours: %v\n  gen: %v", ours, gen)
			}
		})
	}
}

// jsonFields lists a struct's JSON field names, sorted; a field sent under
// another name by MarshalJSON ("-", Level as priority) is left out.
func jsonFields(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}
