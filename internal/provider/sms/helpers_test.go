package sms

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/provider"
)

// A verification message: the code must never show up in an error text.
const (
	testTo   = "+8613900001234"
	testCode = "482915"
)

func verifySMS() provider.SMS {
	return provider.SMS{
		To:       testTo,
		Text:     "Your msgpulse code is " + testCode + ", valid for 5 minutes.",
		TaskID:   "task-7f3a",
		Template: "verify_code",
		Params:   map[string]string{"code": testCode, "ttlMinutes": "5"},
	}
}

// wantErr is the expected classification of a failure.
type wantErr struct {
	class provider.Class
	code  string
	retry time.Duration
}

// requireProviderError checks err is a *provider.Error of the wanted class
// and code, and that it leaks neither the code nor the full number.
func requireProviderError(t *testing.T, err error, name string, want wantErr) *provider.Error {
	t.Helper()
	require.Error(t, err)
	var pe *provider.Error
	require.True(t, errors.As(err, &pe), "want *provider.Error, got %T: %v", err, err)
	require.Equal(t, name, pe.Provider)
	require.Equal(t, want.class, pe.Class, "class of %v", err)
	require.Equal(t, want.code, pe.Code, "code of %v", err)
	require.Equal(t, want.retry, pe.RetryAfter)
	require.NotContains(t, err.Error(), testCode, "error text leaks the verification code")
	require.NotContains(t, err.Error(), "13900001234", "error text leaks the recipient")
	return pe
}
