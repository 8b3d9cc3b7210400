package loadgen

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// The real api, consumer and loadgen (for the baseline server), built once
// by the first integration test that needs them, so a benchmark-only run
// (-run '^$') does not pay for the build.
var (
	buildOnce sync.Once
	bins      *Binaries
	errBuild  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	bins.Close()
	os.Exit(code)
}

// setup gives a test Options on the real broker and Redis, with the
// shared binaries; each mode makes its own vhost and prefix from them.
func setup(t *testing.T) (context.Context, *Options) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs RabbitMQ, Redis and the binaries (run without -short)")
	}
	t.Parallel()
	_ = testenv.NewBroker(t) // fails with advice when RabbitMQ is down
	buildOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		bins, errBuild = Build(ctx, "")
	})
	require.NoError(t, errBuild)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	o := &Options{AMQPURL: testenv.AMQPBase, ManagementURL: testenv.ManagementURL, RedisURL: testenv.RedisURL, RedisMode: testenv.RedisMode, BinDir: bins.Dir, Progress: testWriter{t}}
	o.bins = bins
	return ctx, o
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func TestAPIMode(t *testing.T) {
	ctx, o := setup(t)
	res, err := API(ctx, o, APIOptions{Duration: time.Second, Concurrency: 8, Rounds: 1, Endpoint: EndpointMix, Baseline: true, Window: 64, RawMessages: 500})
	require.NoError(t, err)
	require.True(t, res.HalfMax)
	require.Len(t, res.Rounds, 1)
	rd := res.Rounds[0]
	require.NotNil(t, rd.Max)
	require.Positive(t, rd.Max.Accepted)
	require.Equal(t, map[string]int64{"202": rd.Max.Accepted}, rd.Max.Codes, "frequency control must not reject the spread load")
	require.NotNil(t, rd.Fixed)
	require.InDelta(t, rd.Max.AcceptedRPS/2, rd.Fixed.TargetRate, 1e-9)
	require.Positive(t, rd.Fixed.Latency.N)
	require.NotNil(t, rd.Baseline)
	require.Positive(t, rd.Baseline.Accepted)
	require.Equal(t, rd.Baseline.Requests, rd.Baseline.Accepted)
	require.Positive(t, rd.RawPublish)
	require.Positive(t, rd.RawConsume)
	require.Positive(t, rd.APIMem.Peak())
	require.Positive(t, res.Median.Ratio)
	require.Equal(t, "1000000", res.Config["LIMIT_EMAIL_PER_SECOND"])
}

func TestConsumerMode(t *testing.T) {
	ctx, o := setup(t)
	res, err := Consumer(ctx, o, ConsumerOptions{Messages: 200, Concurrency: 16, Prefetch: 64, ProviderLatency: 20 * time.Millisecond, ProviderConcurrency: 64, WideConcurrency: 32, Rounds: 1, Baseline: true})
	require.NoError(t, err)
	require.Len(t, res.Rounds, 1)
	rd := res.Rounds[0]
	require.Positive(t, rd.Noop)
	// Counted from the binary's stdout: every one of the 200 was printed.
	require.Positive(t, rd.Binary)
	require.Positive(t, rd.BinaryMem.Peak())
	require.Positive(t, rd.BinaryWide)
	require.Positive(t, res.Median.BinaryWide)
	require.Positive(t, rd.Slow)
	// 200 sends of 20 ms each, at most 64 at once: at least 4 waves.
	require.Less(t, rd.Slow, 64/0.020)
	require.Positive(t, rd.SMTP)
	// Notices to one user each are merged into message/send calls, so
	// the adaptive rate (20 calls a second at first) does not bound them.
	require.Positive(t, rd.WeCom)
	require.Positive(t, res.Median.WeCom)
	require.Positive(t, rd.RawConsume)
	require.Positive(t, rd.SMTPMem.Peak())
	require.Positive(t, res.Median.NoopRatio)
}

func TestE2EMode(t *testing.T) {
	ctx, o := setup(t)
	res, err := E2E(ctx, o, E2EOptions{Rate: 50, Duration: 2 * time.Second, Concurrency: 4, SMSShare: 0.2, ConsumerConcurrency: 8, Rounds: 1, Drain: 30 * time.Second})
	require.NoError(t, err)
	require.Len(t, res.Rounds, 1)
	rd := res.Rounds[0]
	require.InDelta(t, 100, rd.Accepted, 2, "codes %v, first error %s", rd.Accept.Codes, rd.Accept.FirstError)
	require.Equal(t, rd.Accepted, rd.Received)
	require.Zero(t, rd.Lost)
	require.Zero(t, rd.DeadLettered)
	require.Zero(t, rd.BadSignatures)
	require.Positive(t, rd.Mail.N)
	require.Positive(t, rd.SMS.N, "SMS go through the webhook sink")
	require.Positive(t, rd.APIMem.Peak())
	require.Positive(t, rd.ConsumerMem.Peak())
}

// --env reaches the in-process no-op consumer as it does the binaries:
// a value its configuration refuses stops the run, naming the variable.
func TestConsumerModeTakesExtraEnv(t *testing.T) {
	ctx, o := setup(t)
	o.ExtraEnv = []string{"REDIS_AUTOPIPELINE=sometimes"}
	_, err := Consumer(ctx, o, ConsumerOptions{Messages: 10, Concurrency: 2, Prefetch: 8, Rounds: 1})
	require.ErrorContains(t, err, "no-op provider")
	require.ErrorContains(t, err, "REDIS_AUTOPIPELINE")
}

// Messages that are never sent must be counted as lost, not waited for
// forever nor reported as received.
func TestE2ECountsLost(t *testing.T) {
	ctx, o := setup(t)
	// A consumer whose SMTP server does not exist and that retries for a
	// long time: accepted mail neither arrives nor is dead-lettered.
	o.ExtraEnv = []string{"SMTP_PORT=1", "RETRY_BACKOFF=1h"}
	res, err := E2E(ctx, o, E2EOptions{Rate: 20, Duration: time.Second, Concurrency: 2, ConsumerConcurrency: 4, Rounds: 1, Drain: 2 * time.Second})
	require.ErrorIs(t, err, ErrLost)
	require.NotNil(t, res)
	rd := res.Rounds[0]
	require.Positive(t, rd.Accepted)
	require.Zero(t, rd.Received)
	require.Equal(t, rd.Accepted, rd.Lost+rd.DeadLettered+rd.Expired)
	require.Positive(t, rd.Lost)
}

func TestDelayMode(t *testing.T) {
	ctx, o := setup(t)
	res, err := Delay(ctx, o, DelayOptions{Mix: 20, MixMax: time.Second, Burst: 20, BurstIn: 500 * time.Millisecond, Relay: 4, Prefetch: 16,
		Mode: topology.DelayExact, Baseline: 10, Margin: 20 * time.Millisecond, Tolerance: 2 * time.Millisecond}, testWriter{t})
	require.NoError(t, err)
	require.Equal(t, 20, res.Mix.N)
	require.Equal(t, 20, res.Burst.N)
	require.Equal(t, 10, res.Baseline.N)
	require.GreaterOrEqual(t, res.Burst.P50, -5.0, "nothing arrives well before it is due")
}

// The levels mode measures both phases in one run: codes with nothing
// queued, then codes while a backlog of normal notices waits.
func TestLevelsMode(t *testing.T) {
	ctx, o := setup(t)
	res, err := Levels(ctx, o, LevelsOptions{Backlog: 600, Codes: 10, CodeRate: 20, SMTPLatency: 20 * time.Millisecond, ConsumerConcurrency: 2, Wait: 30 * time.Second})
	require.NoError(t, err)
	require.EqualValues(t, 10, res.Idle.N)
	require.EqualValues(t, 10, res.Loaded.N)
	require.Zero(t, res.Lost)
	require.Equal(t, 600, res.BulkAccepted)
	require.Positive(t, res.DepthAtCodes, "the codes were sent while notices waited")
	require.Positive(t, res.Loaded.P99)
}

// Every kind of the headline steps through the real system (the raw
// kind through the broker alone), counting each recipient it accepted at
// its sink. The p99 bound is loose here: this checks the counting, not
// this machine's speed.
func TestHeadlineModeStepsEveryKind(t *testing.T) {
	ctx, o := setup(t)
	res, err := Headline(ctx, o, HeadlineOptions{Start: 20, RawStart: 50, Factor: 2, Max: 100, Step: time.Second, P99: 5 * time.Second,
		Concurrency: 4, ConsumerConcurrency: 8, Batch: 10, Drain: 30 * time.Second, Kinds: []string{"mail", "wecom", "raw"}})
	require.NoError(t, err)
	require.Len(t, res.Kinds, 3)
	for _, k := range res.Kinds {
		require.NotEmpty(t, k.Steps, k.Kind)
		for _, st := range k.Steps {
			require.Positive(t, st.Accepted, "%s at %.0f/s", k.Kind, st.Offered)
			require.Equal(t, st.Accepted, st.Received, "%s at %.0f/s: %s", k.Kind, st.Offered, st.Why)
			require.Zero(t, st.Lost)
		}
		require.Positive(t, k.Best, "%s: %+v", k.Kind, k.Steps)
	}
	require.Equal(t, "raw", res.Kinds[2].Kind)
	require.InDelta(t, 50, res.Kinds[2].Steps[0].Offered, 1e-9, "raw starts at RawStart")
}
