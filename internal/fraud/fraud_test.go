package fraud_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/fraud"
	"github.com/msgpulse/msgpulse/internal/fraud/fraudtest"
	"github.com/msgpulse/msgpulse/internal/phone"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

func num(t *testing.T, s string) phone.Number {
	t.Helper()
	n, err := phone.Parse(s)
	require.NoError(t, err)
	return n
}

// A prefix is the country calling code and the national number without
// its last four digits: a block of 10,000 numbers.
func TestPrefix(t *testing.T) {
	cfg := fraud.Config{PrefixDigits: map[string]int{"GB": 5}}
	require.NoError(t, cfg.Validate())
	for in, want := range map[string]string{
		"+8613812345678": "+861381234", // the H code of a Chinese mobile
		"+14155552671":   "+1415555",   // a NANP exchange
		"+6591234567":    "+659123",
		"+447400123456":  "+4474001", // overridden: GB=5
		"+4915112345678": "+491511234",
	} {
		require.Equal(t, want, cfg.Prefix(num(t, in)), in)
	}
	d, err := fraud.ParsePrefixDigits([]string{"gb=5", "US=6"})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"GB": 5, "US": 6}, d)
	for _, bad := range []string{"GB", "XX=5", "GB=0", "GB=x"} {
		_, err := fraud.ParsePrefixDigits([]string{bad})
		require.Error(t, err, bad)
	}
}

func TestPolicy(t *testing.T) {
	by, err := fraud.ParseByTenant([]string{"shop=CN+US"})
	require.NoError(t, err)
	sg, err := phone.ParseCountries("CN+HK+SG")
	require.NoError(t, err)
	p := fraud.Policy{Types: fraud.DefaultTypes, Countries: sg, ByTenant: by}
	for _, tc := range []struct {
		tenant, number string
		want           string // "" = allowed, type or country
	}{
		{"blog", "+8613812345678", ""},
		{"blog", "+6591234567", ""},
		{"blog", "+14155552671", "country"},
		{"shop", "+14155552671", ""},
		{"shop", "+6591234567", "country"},
		{"blog", "+449098790000", "type"},
		{"shop", "+18002345678", "type"},
	} {
		err := p.Check(tc.tenant, num(t, tc.number))
		var te *fraud.TypeError
		var ce *fraud.CountryError
		switch tc.want {
		case "":
			require.NoError(t, err, tc.number)
		case "type":
			require.True(t, errors.As(err, &te), "%s: %v", tc.number, err)
		case "country":
			require.True(t, errors.As(err, &ce), "%s: %v", tc.number, err)
			require.Contains(t, err.Error(), ce.Region)
		}
	}
	err = p.Check("shop", num(t, "+6591234567"))
	require.EqualError(t, err, "verification codes to SG are not allowed for tenant shop: it may send them to CN+US only (VERIFY_SMS_COUNTRIES_BY_TENANT)")
	err = p.Check("blog", num(t, "+449098790000"))
	require.EqualError(t, err, "recipient is a premium-rate number of GB: verification codes go only to mobile, fixed_line_or_mobile, voip numbers (VERIFY_SMS_NUMBER_TYPES)")
	for _, bad := range [][]string{{"shop"}, {"=CN"}, {"shop=CN", "shop=US"}, {"shop=ZZ"}, {"shop="}} {
		_, err := fraud.ParseByTenant(bad)
		require.Error(t, err, "%v", bad)
	}
}

// Numbers of no country (satellite, international networks) get no code
// by default, every country's do; naming 001 lets them through (issue 43).
func TestNoCountryNoCode(t *testing.T) {
	t.Parallel()
	with001, err := phone.ParseCountries("CN+001")
	require.NoError(t, err)
	for _, tc := range []struct {
		countries phone.Countries
		number    string
		allowed   bool
	}{
		{nil, "+8613812345678", true},
		{nil, "+14155552671", true},
		{nil, "+881612345678", false}, // Iridium
		{nil, "+870301234567", false}, // Inmarsat
		{nil, "+8823421234", false},   // an international network
		{with001, "+881612345678", true},
		{with001, "+8823421234", true},
		{with001, "+8613812345678", true},
		{with001, "+14155552671", false},
	} {
		err := fraud.Policy{Types: fraud.DefaultTypes, Countries: tc.countries}.Check("shop", num(t, tc.number))
		if tc.allowed {
			require.NoError(t, err, tc.number)
			continue
		}
		var ce *fraud.CountryError
		require.True(t, errors.As(err, &ce), "%s: %v", tc.number, err)
		if len(tc.countries) == 0 {
			require.EqualError(t, err, "verification codes to numbers of no country (region 001: satellite phones, international networks) are not allowed for tenant shop: name 001 in VERIFY_SMS_COUNTRIES to allow them")
		}
	}
}

// Blocks are listed per tenant (or all), lifted by tenant and prefix at
// once, and counted; another tenant's block of the same prefix is its own.
func TestBlocksListLiftAndCount(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	ctx := testenv.Context(t, 30*time.Second)
	lim := ratelimit.New(r.Client, r.Prefix)
	g, err := fraud.New(r.Client, r.Prefix, fraud.Config{}, lim.ClockOffset)
	require.NoError(t, err)
	uk := num(t, "+447400123456")
	_, ge := fraudtest.Block(t, ctx, g, lim, "shop", uk.E164)
	require.Equal(t, 50, ge.Sent)
	_, _ = fraudtest.Block(t, ctx, g, lim, "blog", uk.E164)
	_, _ = fraudtest.Block(t, ctx, g, lim, "blog", "+8613812345678")

	all, err := g.Blocks(ctx, "")
	require.NoError(t, err)
	require.Len(t, all, 3)
	require.Equal(t, fraud.Block{Tenant: "blog", Prefix: "+44740012", Country: "GB", Reason: "unverified", Since: all[0].Since, Until: all[0].Since.Add(time.Hour), Sent: 50}, all[0])
	shop, err := g.Blocks(ctx, "shop")
	require.NoError(t, err)
	require.Len(t, shop, 1)
	n, err := g.Blocked(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, n)

	require.NoError(t, g.Lift(ctx, "shop", "+44740012"))
	require.ErrorIs(t, g.Lift(ctx, "shop", "+44740012"), fraud.ErrNoBlock)
	require.ErrorIs(t, g.Lift(ctx, "shop", "+861381234"), fraud.ErrNoBlock, "blog's block is not shop's")
	shop, err = g.Blocks(ctx, "shop")
	require.NoError(t, err)
	require.Empty(t, shop)
	blog, err := g.Blocks(ctx, "blog")
	require.NoError(t, err)
	require.Len(t, blog, 2, "blog's blocks stay")
	// Lifted, the prefix starts afresh: the next codes go.
	w, _ := g.Watch("shop", uk)
	for i := range 10 {
		_, err := lim.Take(ctx, ratelimit.Request{Guard: w})
		require.NoError(t, err, fmt.Sprint(i))
	}
	// An ended block is neither listed nor counted.
	lim.Advance(2 * time.Hour)
	all, err = g.Blocks(ctx, "")
	require.NoError(t, err)
	require.Empty(t, all)
	n, err = g.Blocked(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestConfig(t *testing.T) {
	c := fraud.Config{}
	require.NoError(t, c.Validate())
	require.Equal(t, fraud.Standard, c.Level)
	require.Equal(t, fraud.Levels[fraud.Standard], c.Thresholds)
	off := fraud.Config{Level: fraud.Off}
	require.NoError(t, off.Validate())
	g, err := fraud.New(nil, "p:", off, nil)
	require.NoError(t, err)
	w, _ := g.Watch("shop", num(t, "+447400123456"))
	require.Nil(t, w)
	require.Nil(t, g.Tally("shop", num(t, "+447400123456")))
	bad := fraud.Config{Level: "paranoid"}
	require.Error(t, bad.Validate())
	short := fraud.Config{Level: fraud.Max, Thresholds: fraud.Thresholds{MinSends: 1, SpikeMin: 1, SpikeFactor: 2, Window: time.Hour, Baseline: time.Hour, BlockFor: time.Hour}}
	require.ErrorContains(t, short.Validate(), "baseline")
}
