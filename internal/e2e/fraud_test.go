package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/pkg/client"
)

// The fraud guard and the number policy through the real api binary, every
// setting at its default: numbers parsed (400), a pumped prefix blocked
// after FRAUD_GUARD=standard's 50 unverified codes (429 naming it, with
// Retry-After), listed and lifted through the client, and a lift on one
// API process lets the next code through on another at once.
func TestFraudGuardThroughTwoAPIProcesses(t *testing.T) {
	s := newSystem(t)
	_, one := s.api()
	_, two := s.api()
	ctx := testenv.Context(t, 60*time.Second)
	code := func(c *client.Client, number string, i int) error {
		_, err := c.RequestVerificationCode(ctx, client.VerificationCodeRequest{Channel: client.ChannelSMS, Recipient: number, Purpose: "login",
			ClientIP: fmt.Sprintf("198.51.100.%d", i%250)})
		return err
	}
	for number, want := range map[string]string{
		"+44 909 879 0000": "premium-rate number of GB",
		"+86 12345678":     "is not a number CN (+86) assigns",
	} {
		var ae *client.APIError
		require.True(t, errors.As(code(one, number, 0), &ae), number)
		require.Equal(t, http.StatusBadRequest, ae.StatusCode)
		require.Contains(t, ae.Msg, want)
	}

	sent := 0
	var refused error
	for i := range 80 {
		if refused = code(one, fmt.Sprintf("+4474001%05d", 20000+i), i); refused != nil {
			break
		}
		sent++
	}
	require.Equal(t, 50, sent)
	wait, limited := client.IsRateLimited(refused)
	require.True(t, limited, "%v", refused)
	require.Equal(t, time.Hour, wait)
	require.ErrorContains(t, refused, "suspected SMS pumping to +44740012 (GB)")
	_, limited = client.IsRateLimited(code(two, "+447400129999", 0))
	require.True(t, limited, "the other process refuses it too")

	blocks, err := two.ListFraudBlocks(ctx)
	require.NoError(t, err)
	require.Len(t, blocks, 1)
	require.Equal(t, "+44740012", blocks[0].Prefix)
	require.NoError(t, two.LiftFraudBlock(ctx, blocks[0].Tenant, blocks[0].Prefix))
	start := time.Now()
	require.NoError(t, code(one, "+447400129998", 0), "lifted by the other process")
	require.Less(t, time.Since(start), time.Second)
	require.True(t, client.IsNotFound(two.LiftFraudBlock(ctx, blocks[0].Tenant, blocks[0].Prefix)), "no block left")
}

// VERIFY_SMS_COUNTRIES and VERIFY_SMS_COUNTRIES_BY_TENANT through the real
// binary: another country is 403 naming it and the setting.
func TestSMSCodeCountriesThroughTheAPI(t *testing.T) {
	s := newSystem(t, "VERIFY_SMS_COUNTRIES=CN+HK+SG", "VERIFY_SMS_COUNTRIES_BY_TENANT=other=GB")
	_, c := s.api()
	ctx := testenv.Context(t, 30*time.Second)
	_, err := c.RequestVerificationCode(ctx, client.VerificationCodeRequest{Channel: client.ChannelSMS, Recipient: "+447400123456", Purpose: "login"})
	var ae *client.APIError
	require.True(t, errors.As(err, &ae), "%v", err)
	require.Equal(t, http.StatusForbidden, ae.StatusCode)
	require.Equal(t, "verification codes to GB are not allowed for tenant e2e: it may send them to CN+HK+SG only (VERIFY_SMS_COUNTRIES)", ae.Msg)
	_, err = c.RequestVerificationCode(ctx, client.VerificationCodeRequest{Channel: client.ChannelSMS, Recipient: "+6591234567", Purpose: "login"})
	require.NoError(t, err)
}

// With every setting at its default, numbers of no country (satellite,
// international networks: classic pumping destinations) get no code, and
// a Chinese mobile number still does (issue 43).
func TestNoCountryNoCodeThroughTheAPI(t *testing.T) {
	s := newSystem(t)
	_, c := s.api()
	ctx := testenv.Context(t, 30*time.Second)
	for _, n := range []string{"+881612345678", "+870301234567", "+8823421234"} {
		_, err := c.RequestVerificationCode(ctx, client.VerificationCodeRequest{Channel: client.ChannelSMS, Recipient: n, Purpose: "login"})
		var ae *client.APIError
		require.True(t, errors.As(err, &ae), "%s: %v", n, err)
		require.Equal(t, http.StatusForbidden, ae.StatusCode, n)
		require.Contains(t, ae.Msg, "numbers of no country", n)
	}
	_, err := c.RequestVerificationCode(ctx, client.VerificationCodeRequest{Channel: client.ChannelSMS, Recipient: "+8613900001234", Purpose: "login"})
	require.NoError(t, err)
}
