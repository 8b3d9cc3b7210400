package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Every publish 503 names its real cause and says when to come back; a
// 503 whose message may have been kept says so, and names the
// Idempotency-Key header instead of promising a safe retry.
func TestPublishFailureNamesTheCause(t *testing.T) {
	m, err := topology.Build(topology.DefaultConfig(), "")
	require.NoError(t, err)
	ct, err := m.Channel(topology.Mail)
	require.NoError(t, err)
	normal, code := ct.Level(topology.Normal), ct.Level(topology.Code)
	for _, tc := range []struct {
		name  string
		err   error
		want  []string
		never string
		retry time.Duration
	}{
		{"full level queue", &LevelFullError{Level: normal, Err: broker.ErrNacked},
			[]string{"queue.mail.normal is full (bound 1000000, MAIL_NORMAL_QUEUE_MAX_LENGTH)", "safe to retry"}, "no connection", levelFullRetryAfter},
		{"admission", &LevelFullError{Level: code, Admission: &AdmissionRefusal{Depth: 800, Limit: 800, Fill: 0.8, EnvFill: "MAIL_QUEUE_ADMIT_FILL"}, Err: errAdmission},
			[]string{"queue.mail is nearly full (about 800 messages; the API admits up to 800, MAIL_QUEUE_ADMIT_FILL=0.8 of the bound 1000, MAIL_QUEUE_MAX_LENGTH)"}, "no connection", codeFullRetryAfter},
		{"confirm timeout", fmt.Errorf("%w: %w", broker.ErrConfirmTimeout, context.DeadlineExceeded),
			[]string{"no confirm arrived within PUBLISH_TIMEOUT", "MAY have been kept", "Idempotency-Key"}, "safe to retry", unavailableRetryAfter},
		{"connection lost mid-publish", fmt.Errorf("%w: %w", broker.ErrUnavailable, broker.ErrConfirmLost),
			[]string{"connection to RabbitMQ was lost before the confirm", "MAY have been kept", "Idempotency-Key"}, "safe to retry", unavailableRetryAfter},
		{"not connected", fmt.Errorf("%w: not connected", broker.ErrUnavailable),
			[]string{"there is no connection to RabbitMQ", "nothing was kept"}, "Idempotency-Key", unavailableRetryAfter},
		{"exchange missing", fmt.Errorf("%w: the broker closed the channel: %w", broker.ErrUnavailable, &amqp.Error{Code: amqp.NotFound}),
			[]string{"its exchange does not exist", "nothing was kept"}, "no connection", unavailableRetryAfter},
		{"high queue nack (leader change)", broker.ErrNacked,
			[]string{"the broker refused it", "nothing was kept"}, "no connection", unavailableRetryAfter},
		{"blocked", broker.ErrBlocked, []string{"blocking publishers"}, "no connection", levelFullRetryAfter},
		{"too large", fmt.Errorf("%w: %w", broker.ErrTooLarge, &amqp.Error{Code: amqp.PreconditionFailed}),
			[]string{"larger than the broker's max_message_size", "nothing was kept"}, "no connection", unavailableRetryAfter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := publishFailure(tc.err)
			require.Equal(t, http.StatusServiceUnavailable, e.Status)
			for _, w := range tc.want {
				require.Contains(t, e.Msg, w)
			}
			require.NotContains(t, e.Msg, tc.never)
			require.Equal(t, tc.retry, e.RetryAfter)
			require.True(t, errors.Is(e, tc.err) || errors.Is(e.cause, tc.err))
		})
	}
}
