package callbackkey

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const codeSecret = "code-secret-0123456789abcdefghabcdef0123456789"

// Derived keys are per tenant, independent of each other and of
// CODE_SECRET, and an explicit entry wins over the derived one.
func TestKeysPerTenant(t *testing.T) {
	t.Parallel()
	k, err := New(map[string]string{"shopA": "shopA-explicit-secret-01"}, "master-callback-secret-01", codeSecret)
	require.NoError(t, err)
	a, err := k.For("shopA")
	require.NoError(t, err)
	require.Equal(t, "shopA-explicit-secret-01", a)
	b, err := k.For("shopB")
	require.NoError(t, err)
	c, err := k.For("shopC")
	require.NoError(t, err)
	require.NotEqual(t, b, c)
	require.Equal(t, Derive("master-callback-secret-01", "shopB"), b)
	require.Len(t, b, 64)
	for _, key := range []string{b, c} {
		require.NotEqual(t, codeSecret, key)
		require.NotEqual(t, "master-callback-secret-01", key)
	}
	// Derivation is domain-separated: not a plain HMAC of the name.
	require.NotEqual(t, Derive("master-callback-secret-01", "shopB"), Derive("master-callback-secret-01", "shopB|"))

	none, err := New(nil, "")
	require.NoError(t, err)
	require.False(t, none.Configured())
	_, err = none.For("shopA")
	require.ErrorIs(t, err, ErrNoKey)
	only, err := New(map[string]string{"shopA": "shopA-explicit-secret-01"}, "")
	require.NoError(t, err)
	_, err = only.For("shopB")
	require.ErrorIs(t, err, ErrNoKey, "no fallback to another tenant's key or CODE_SECRET")
}

func TestNewRefusesSecretsThatOpenMore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		explicit map[string]string
		master   string
		setting  string
		msg      string
	}{
		{"master is CODE_SECRET", nil, codeSecret, "CALLBACK_SECRET", "CODE_SECRET"},
		{"master too short", nil, "short", "CALLBACK_SECRET", "at least 16"},
		{"entry is CODE_SECRET", map[string]string{"a": codeSecret}, "", "CALLBACK_SECRETS", "CODE_SECRET"},
		{"entry is the master", map[string]string{"a": "master-callback-secret-01"}, "master-callback-secret-01", "CALLBACK_SECRETS", "equals CALLBACK_SECRET"},
		{"two tenants share one", map[string]string{"a": "same-secret-0123456789abcdefgh", "b": "same-secret-0123456789abcdefgh"}, "", "CALLBACK_SECRETS", "same secret"},
		{"entry too short", map[string]string{"a": "short"}, "", "CALLBACK_SECRETS", "at least 16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.explicit, tc.master, codeSecret)
			var se *SettingError
			require.ErrorAs(t, err, &se)
			require.Equal(t, tc.setting, se.Setting)
			require.Contains(t, se.Msg, tc.msg)
			require.NotContains(t, err.Error(), codeSecret)
			require.NotContains(t, err.Error(), "same-secret")
		})
	}
}

func TestParseList(t *testing.T) {
	t.Parallel()
	m, err := ParseList(" shopA = a-secret-0123456789abcdefgh ,shopB=b=secret-0123456789abcdefgh,")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"shopA": "a-secret-0123456789abcdefgh", "shopB": "b=secret-0123456789abcdefgh"}, m)
	_, err = ParseList("shopA=x-secret-0123456789abcdefgh,shopA=y-secret-0123456789abcdefgh")
	require.ErrorContains(t, err, "twice")
	_, err = ParseList("no-equals-secret-0123456789abcdefgh")
	require.ErrorContains(t, err, "entry 1")
	require.NotContains(t, err.Error(), "secret-0123456789abcdefgh")
}

// The signature covers the timestamp, the tenant, the URL and the body;
// Verify refuses a change to any, another key, and a timestamp more than
// five minutes off.
func TestSignAndVerify(t *testing.T) {
	t.Parallel()
	const key, url = "shopA-explicit-secret-01", "https://hooks.shop.example/status"
	body := []byte(`{"event":"message.status"}`)
	now := time.Unix(1_800_000_000, 0)
	ts := now.Unix()
	sig := Sign(key, ts, "shopA", url, body)
	require.Regexp(t, `^v1=[0-9a-f]{64}$`, sig)
	require.Equal(t, "v1\n1800000000\nshopA\n"+url+"\n"+string(body), string(StringToSign(ts, "shopA", url, body)))
	ok := func(key, sig, ts, tenant, want, url string, body []byte, at time.Time) error {
		return Verify(key, sig, ts, tenant, want, url, body, at)
	}
	require.NoError(t, ok(key, sig, "1800000000", "shopA", "shopA", url, body, now))
	require.NoError(t, ok(key, sig, "1800000000", "shopA", "shopA", url, body, now.Add(MaxAge)))
	require.ErrorIs(t, ok(key, sig, "1800000000", "shopA", "shopA", url, body, now.Add(MaxAge+time.Second)), ErrStale)
	require.ErrorIs(t, ok(key, sig, "1800000000", "shopA", "shopA", url, body, now.Add(-MaxAge-time.Second)), ErrStale)
	require.ErrorIs(t, ok("other-tenant-secret-0001", sig, "1800000000", "shopA", "shopA", url, body, now), ErrBadSignature)
	require.ErrorIs(t, ok(key, sig, "1800000001", "shopA", "shopA", url, body, now), ErrBadSignature)
	require.ErrorIs(t, ok(key, sig, "1800000000", "shopB", "", url, body, now), ErrBadSignature)
	require.ErrorIs(t, ok(key, sig, "1800000000", "shopB", "shopA", url, body, now), ErrWrongTenant)
	require.ErrorIs(t, ok(key, sig, "1800000000", "shopA", "shopA", url+"/x", body, now), ErrBadSignature)
	require.ErrorIs(t, ok(key, sig, "1800000000", "shopA", "shopA", url, []byte(`{}`), now), ErrBadSignature)
	require.ErrorIs(t, ok(key, sig, "soon", "shopA", "shopA", url, body, now), ErrStale)
}
