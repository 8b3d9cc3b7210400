package channel

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/provider"
)

// A rendered channel calls its provider only with what it rendered; a
// render that fails is ErrTemplate (permanent) and reaches no provider,
// and a provider's answer comes back as it was.
func TestRenderedSendsOnlyWhatItRendered(t *testing.T) {
	refused := &provider.Error{Provider: "p", Class: provider.Permanent, Code: "refused"}
	for _, tc := range []struct {
		name      string
		renderErr error
		callErr   error
		calls     int
		is        error
	}{
		{"sent", nil, nil, 1, nil},
		{"render fails", errors.New("no such template"), nil, 0, ErrTemplate},
		{"provider refuses", nil, refused, 1, provider.ErrPermanent},
	} {
		var got []string
		ch := &Rendered[string]{
			Channel: "mail",
			Name:    func() string { return "p" },
			Render: func(t *Task) (string, error) {
				return "hello " + t.Vars["name"], tc.renderErr
			},
			Call: func(_ context.Context, _ *Task, text string) (provider.Receipt, error) {
				got = append(got, text)
				return provider.Receipt{Provider: "p"}, tc.callErr
			},
		}
		task := &Task{Msg: &envelope.Message{TaskID: "t1"}, Vars: map[string]string{"name": "ada"}}
		_, err := ch.Send(context.Background(), context.Background(), task)
		require.Len(t, got, tc.calls, tc.name)
		if tc.is == nil {
			require.NoError(t, err, tc.name)
			require.Equal(t, []string{"hello ada"}, got, tc.name)
			continue
		}
		require.ErrorIs(t, err, tc.is, tc.name)
	}
}

// A channel without a provider fails every send for good, and admits the
// provider's rules as they are.
func TestUnconfiguredFailsForGood(t *testing.T) {
	u := Unconfigured{What: "SMS"}
	require.Equal(t, "none", u.Provider())
	_, err := u.Send(context.Background(), context.Background(), &Task{})
	require.ErrorIs(t, err, ErrTemplate)
	require.EqualError(t, err, "cannot render the message: this consumer has no SMS provider")
	require.Zero(t, u.Holds("normal"))
}
