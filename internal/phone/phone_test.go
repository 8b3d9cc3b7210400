package phone_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/phone"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		e164    string
		region  string
		typ     phone.Type
		invalid string // part of the error
	}{
		{in: "+8613812345678", e164: "+8613812345678", region: "CN", typ: phone.Mobile},
		// One number, one form: formatting is not a new recipient.
		{in: "+44 7400 123456", e164: "+447400123456", region: "GB", typ: phone.Mobile},
		{in: "+44 (7400) 123-456", e164: "+447400123456", region: "GB", typ: phone.Mobile},
		{in: "+1 415.555.2671", e164: "+14155552671", region: "US", typ: phone.FixedLineOrMobile},
		{in: "+1 416 555 0123", e164: "+14165550123", region: "CA", typ: phone.FixedLineOrMobile},
		{in: "+449098790000", e164: "+449098790000", region: "GB", typ: phone.PremiumRate},
		{in: "+448001234567", e164: "+448001234567", region: "GB", typ: phone.TollFree},
		{in: "+34901123456", e164: "+34901123456", region: "ES", typ: phone.SharedCost},
		{in: "+447012345678", e164: "+447012345678", region: "GB", typ: phone.PersonalNumber},
		{in: "+6591234567", e164: "+6591234567", region: "SG", typ: phone.Mobile},
		{in: "+8612345678", invalid: "not a number CN (+86) assigns"},
		{in: "+86 123", invalid: "too short for a number of CN"},
		{in: "+861381234567890123", invalid: "3 to 17 digits"},
		{in: "+4490987900001", invalid: "too long for a number of GB"},
		{in: "+15551234567", invalid: "not a number US (+1) assigns"},
		{in: "+999123456789", invalid: "no country's calling code"},
		{in: "8613812345678", invalid: "must be an E.164 number"},
		{in: "+1 800 FLOWERS", invalid: "only digits"},
		{in: "+44 7400 123456 ext. 12", invalid: "only digits"},
		{in: "+", invalid: "3 to 17 digits"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			n, err := phone.Parse(tc.in)
			if tc.invalid != "" {
				require.Error(t, err)
				require.True(t, errors.Is(err, phone.ErrInvalid))
				require.Contains(t, err.Error(), tc.invalid)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.e164, n.E164)
			require.Equal(t, tc.region, n.Region)
			require.Equal(t, tc.typ, n.Type, "type %s", n.Type)
			require.Equal(t, tc.e164, "+"+itoa(n.CallingCode)+n.National)
		})
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

func TestTypeNames(t *testing.T) {
	for _, name := range phone.TypeNames() {
		typ, err := phone.ParseType(name)
		require.NoError(t, err)
		require.Equal(t, name, typ.String())
	}
	_, err := phone.ParseType("landline")
	require.ErrorContains(t, err, "premium_rate")
}

func TestCountries(t *testing.T) {
	c, err := phone.ParseCountries("sg+CN+HK+CN")
	require.NoError(t, err)
	require.Equal(t, "CN+HK+SG", c.String())
	require.True(t, c.Allows("HK"))
	require.False(t, c.Allows("US"))
	all, err := phone.ParseCountries("")
	require.NoError(t, err)
	require.True(t, all.Allows("US"))
	_, err = phone.ParseCountries("CN+UK")
	require.ErrorContains(t, err, `"UK"`)
}
