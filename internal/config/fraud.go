package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/fraud"
	"github.com/msgpulse/msgpulse/internal/phone"
)

// loadSMSCodePolicy reads which numbers verification codes may go to.
func loadSMSCodePolicy(l *envconf.Loader) fraud.Policy {
	var p fraud.Policy
	def := make([]string, len(fraud.DefaultTypes))
	for i, t := range fraud.DefaultTypes {
		def[i] = t.String()
	}
	names := l.List("VERIFY_SMS_NUMBER_TYPES", strings.Join(def, ","),
		"number types an SMS verification code may go to, comma-separated, of "+strings.Join(phone.TypeNames(), ", ")+
			" (libphonenumber's types); a code to any other type is 400 naming it. Premium-rate, shared-cost and toll-free numbers are where SMS pumping earns")
	types, err := fraud.ParseTypes(names)
	if err != nil {
		l.Fail("VERIFY_SMS_NUMBER_TYPES", strings.Join(names, ","), "%v", err)
	}
	p.Types = types
	countries := l.String("VERIFY_SMS_COUNTRIES", "", "countries (ISO 3166 alpha-2 codes joined by +, e.g. CN+HK+SG) every tenant's SMS verification codes may go to; empty = all. A code to another country is 403 naming it and this setting")
	if p.Countries, err = phone.ParseCountries(countries); err != nil {
		l.Fail("VERIFY_SMS_COUNTRIES", countries, "%v", err)
	}
	by := l.List("VERIFY_SMS_COUNTRIES_BY_TENANT", "", "per-tenant VERIFY_SMS_COUNTRIES: tenant=CN+US,… (a tenant listed here gets its own list instead)")
	if p.ByTenant, err = fraud.ParseByTenant(by); err != nil {
		l.Fail("VERIFY_SMS_COUNTRIES_BY_TENANT", strings.Join(by, ","), "%v", err)
	}
	return p
}

// loadFraudGuard reads FRAUD_GUARD and its thresholds, whose defaults are
// the level's (fraud.Levels).
func loadFraudGuard(l *envconf.Loader) fraud.Config {
	c := fraud.Config{Level: fraud.Level(l.Enum("FRAUD_GUARD", string(fraud.Standard), fraud.LevelNames,
		"the SMS pumping guard: per tenant and destination prefix, codes sent and verified over FRAUD_GUARD_WINDOW; a prefix with too few verified, "+
			"or far above its own baseline, is refused (429 naming it, \"suspected SMS pumping\") for FRAUD_GUARD_BLOCK_FOR. basic, standard and max set "+
			"the thresholds' defaults ("+levelsHelp()+"); off turns it off"))}
	t, ok := fraud.Levels[c.Level]
	if !ok {
		t = fraud.Levels[fraud.Standard]
	}
	c.MinSends = l.Int("FRAUD_GUARD_MIN_SENDS", t.MinSends, 1, 1_000_000, "codes sent to a prefix in FRAUD_GUARD_WINDOW before its verified share is judged (default: FRAUD_GUARD's level)")
	c.MinVerified = l.Float("FRAUD_GUARD_MIN_VERIFIED", t.MinVerified, 0, 1, "share of those codes verified below which the prefix is blocked (default: FRAUD_GUARD's level)")
	c.SpikeFactor = l.Float("FRAUD_GUARD_SPIKE_FACTOR", t.SpikeFactor, 1, 1_000_000, "a prefix with more than this many times its own average per FRAUD_GUARD_WINDOW (over FRAUD_GUARD_BASELINE) is blocked, verified or not (default: FRAUD_GUARD's level)")
	c.SpikeMin = l.Int("FRAUD_GUARD_SPIKE_MIN", t.SpikeMin, 1, 100_000_000, "codes in FRAUD_GUARD_WINDOW below which no spike is judged; a prefix without history is blocked here (default: FRAUD_GUARD's level)")
	c.Window = l.Duration("FRAUD_GUARD_WINDOW", t.Window, time.Minute, 7*24*time.Hour, "the sliding window codes sent and verified are counted over")
	c.Baseline = l.Duration("FRAUD_GUARD_BASELINE", t.Baseline, 2*time.Minute, 30*24*time.Hour, "the sliding span a prefix's baseline (its average per window) is taken over; at least twice FRAUD_GUARD_WINDOW")
	c.BlockFor = l.Duration("FRAUD_GUARD_BLOCK_FOR", t.BlockFor, time.Second, 30*24*time.Hour, "how long a blocked prefix refuses codes, unless lifted (DELETE /api/fraud/blocks/{tenant}/{prefix}) (default: FRAUD_GUARD's level)")
	c.Lift = fraud.Lifter(l.Enum("FRAUD_GUARD_LIFT", string(fraud.LiftTenant), []string{string(fraud.LiftTenant), string(fraud.LiftAdmin)},
		"who may lift a block before it ends (DELETE /api/fraud/blocks/{tenant}/{prefix}): tenant, the blocked tenant's send keys and admin keys; admin, admin keys only (a tenant's DELETE is 403)"))
	digits := l.List("FRAUD_GUARD_PREFIX_DIGITS", "", "per country, how many digits of the national number a guarded prefix keeps: GB=5,US=6; elsewhere all but the last 4 (a block of 10,000 numbers)")
	var err error
	if c.PrefixDigits, err = fraud.ParsePrefixDigits(digits); err != nil {
		l.Fail("FRAUD_GUARD_PREFIX_DIGITS", strings.Join(digits, ","), "%v", err)
	}
	if err := c.Validate(); err != nil && c.Level != fraud.Off {
		l.Fail("FRAUD_GUARD_BASELINE", c.Baseline.String(), "%v", err)
	}
	return c
}

func levelsHelp() string {
	var out []string
	for _, name := range fraud.LevelNames[1:] {
		t := fraud.Levels[fraud.Level(name)]
		out = append(out, fmt.Sprintf("%s: %d sent and under %g%% verified, or %d and %g× the baseline, blocks for %s",
			name, t.MinSends, t.MinVerified*100, t.SpikeMin, t.SpikeFactor, t.BlockFor))
	}
	return strings.Join(out, "; ")
}
