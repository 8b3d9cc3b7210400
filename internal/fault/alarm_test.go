package fault

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The memory alarm is broker-wide: every test publishing to this RabbitMQ
// stalls while it lasts. So the previous watermark is read first, written
// to a marker file (a run killed before its cleanup is repaired by the
// next run's TestMain), and restored when the scenario ends, whatever
// happened. The marker is per broker (rabbitmqctlCommand), so a run on a
// private node never repairs the shared one with its value.
var watermarkMarker = filepath.Join(os.TempDir(), "msgpulse-fault-watermark"+markerSuffix())

// rabbitmqctlVar names the command that runs rabbitmqctl against the broker
// under test, when it is not the rabbitmqctl on the PATH: a private node,
// such as the RabbitMQ 4.x one scripts/ runs from a Debian root, e.g.
// "chroot ROOT env RABBITMQ_NODENAME=rmq4@localhost ERL_EPMD_PORT=4370
// HOME=/var/lib/rabbitmq rabbitmqctl -n rmq4@localhost" (split on spaces).
// Point TEST_AMQP_URL at the same node.
const rabbitmqctlVar = "TEST_RABBITMQCTL"

func rabbitmqctlCommand() []string {
	if cmd := strings.Fields(os.Getenv(rabbitmqctlVar)); len(cmd) > 0 {
		return cmd
	}
	return []string{"rabbitmqctl"}
}

func markerSuffix() string {
	if os.Getenv(rabbitmqctlVar) == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(os.Getenv(rabbitmqctlVar)))
	return "-" + hex.EncodeToString(sum[:6])
}

func rabbitmqctl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := append(rabbitmqctlCommand(), args...)
	out, err := exec.CommandContext(ctx, cmd[0], cmd[1:]...).CombinedOutput() //nolint:gosec // the test operator's own command
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(cmd, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// watermark returns the broker's memory high watermark as the arguments
// that set it again: ["0.4"] (relative) or ["absolute", "1073741824"].
func watermark() ([]string, error) {
	out, err := rabbitmqctl("eval", "vm_memory_monitor:get_vm_memory_high_watermark().")
	if err != nil {
		return nil, err
	}
	return parseWatermark(out)
}

func parseWatermark(out string) ([]string, error) {
	s := strings.TrimSpace(out)
	if kind, v, ok := strings.Cut(strings.Trim(s, "{}"), ","); ok && strings.HasPrefix(s, "{") {
		switch kind {
		case "absolute":
			return []string{"absolute", v}, nil
		case "relative":
			s = v
		default:
			return nil, fmt.Errorf("memory watermark %q: unknown form", out)
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, fmt.Errorf("memory watermark %q: %w", out, err)
	}
	if f <= 0 {
		return nil, fmt.Errorf("memory watermark is %s: the broker is already in alarm (left by an earlier run?); set it back with `rabbitmqctl set_vm_memory_high_watermark 0.4`", s)
	}
	return []string{s}, nil
}

// raiseMemoryAlarm sets the watermark to 0, which raises the memory alarm at
// once. It returns when it asked for that, and the function that restores
// the previous value (also registered as a cleanup; calling it twice is
// harmless).
func raiseMemoryAlarm(t *testing.T) (raisedAt time.Time, restore func()) {
	t.Helper()
	if _, err := exec.LookPath(rabbitmqctlCommand()[0]); err != nil {
		t.Skipf("%s not found: the broker-alarm scenarios need it to raise a real memory alarm (%s)", rabbitmqctlCommand()[0], rabbitmqctlVar)
	}
	prev, err := watermark()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(watermarkMarker, []byte(strings.Join(prev, " ")), 0o600))
	done := false
	restore = func() {
		if done {
			return
		}
		done = true
		if _, err := rabbitmqctl(append([]string{"set_vm_memory_high_watermark"}, prev...)...); err != nil {
			t.Errorf("RESTORE THE BROKER BY HAND: rabbitmqctl set_vm_memory_high_watermark %s: %v", strings.Join(prev, " "), err)
			return
		}
		_ = os.Remove(watermarkMarker)
	}
	t.Cleanup(restore)
	raisedAt = time.Now()
	_, err = rabbitmqctl("set_vm_memory_high_watermark", "0")
	require.NoError(t, err)
	return raisedAt, restore
}

// repairWatermark restores a watermark that a killed run left at 0.
func repairWatermark() error {
	b, err := os.ReadFile(watermarkMarker)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	prev := strings.Fields(string(b))
	if len(prev) == 0 {
		return os.Remove(watermarkMarker)
	}
	fmt.Fprintf(os.Stderr, "fault: an earlier run left the broker's memory alarm raised; restoring watermark %s\n", strings.Join(prev, " "))
	if _, err := rabbitmqctl(append([]string{"set_vm_memory_high_watermark"}, prev...)...); err != nil {
		return err
	}
	return os.Remove(watermarkMarker)
}

func TestParseWatermark(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{"0.4", []string{"0.4"}, ""},
		{"{relative,0.6}", []string{"0.6"}, ""},
		{"{absolute,1073741824}", []string{"absolute", "1073741824"}, ""},
		{"0.0", nil, "already in alarm"},
		{"{bogus,1}", nil, "unknown form"},
		{"soon", nil, "invalid syntax"},
	} {
		got, err := parseWatermark(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
}
