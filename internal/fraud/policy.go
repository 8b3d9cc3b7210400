package fraud

import (
	"fmt"
	"slices"
	"strings"

	"github.com/msgpulse/msgpulse/internal/phone"
)

// DefaultTypes are the number types a code goes to by default
// (VERIFY_SMS_NUMBER_TYPES): those that receive SMS and cost what an SMS
// costs. Premium-rate, shared-cost and toll-free numbers are where SMS
// pumping earns its money; fixed lines, pagers, UANs and voicemail
// access numbers do not receive SMS; personal (follow-me) numbers are
// premium-priced forwarding numbers, UK 070 the known abuse.
var DefaultTypes = []phone.Type{phone.Mobile, phone.FixedLineOrMobile, phone.VoIP}

// Policy says which numbers a tenant's verification codes may go to.
type Policy struct {
	// Types are the number types allowed (VERIFY_SMS_NUMBER_TYPES).
	Types []phone.Type
	// Countries are where every tenant's codes may go
	// (VERIFY_SMS_COUNTRIES); empty is everywhere.
	Countries phone.Countries
	// ByTenant overrides Countries for a tenant
	// (VERIFY_SMS_COUNTRIES_BY_TENANT).
	ByTenant map[string]phone.Countries
}

// TypeError refuses a number of a type codes do not go to (400).
type TypeError struct {
	Number  phone.Number
	Allowed []phone.Type
}

func (e *TypeError) Error() string {
	names := make([]string, len(e.Allowed))
	for i, t := range e.Allowed {
		names[i] = t.String()
	}
	return fmt.Sprintf("recipient is a %s number of %s: verification codes go only to %s numbers (VERIFY_SMS_NUMBER_TYPES)",
		e.Number.Type.Describe(), e.Number.Region, strings.Join(names, ", "))
}

// CountryError refuses a number of a country the tenant may not send
// codes to (403).
type CountryError struct {
	Region  string
	Tenant  string
	Allowed phone.Countries
	// Setting is the variable that decided: VERIFY_SMS_COUNTRIES, or
	// VERIFY_SMS_COUNTRIES_BY_TENANT for a tenant it names.
	Setting string
}

func (e *CountryError) Error() string {
	if !e.Allowed.Allows(e.Region) && (e.Region == phone.NonGeographic || e.Region == "") {
		return fmt.Sprintf("verification codes to numbers of no country (region 001: satellite phones, international networks) are not allowed for tenant %s: name 001 in %s to allow them",
			e.Tenant, e.Setting)
	}
	return fmt.Sprintf("verification codes to %s are not allowed for tenant %s: it may send them to %s only (%s)",
		e.Region, e.Tenant, e.Allowed, e.Setting)
}

// Check returns a *TypeError or a *CountryError when tenant may not send a
// code to n, else nil. The type is checked first: it is the number's own
// fault, whoever sends.
func (p Policy) Check(tenant string, n phone.Number) error {
	if !slices.Contains(p.Types, n.Type) {
		return &TypeError{Number: n, Allowed: p.Types}
	}
	allowed, setting := p.Countries, "VERIFY_SMS_COUNTRIES"
	if c, ok := p.ByTenant[tenant]; ok {
		allowed, setting = c, "VERIFY_SMS_COUNTRIES_BY_TENANT"
	}
	if !allowed.Allows(n.Region) {
		return &CountryError{Region: n.Region, Tenant: tenant, Allowed: allowed, Setting: setting}
	}
	return nil
}

// ParseTypes reads VERIFY_SMS_NUMBER_TYPES's list of type names.
func ParseTypes(names []string) ([]phone.Type, error) {
	var out []phone.Type
	for _, n := range names {
		t, err := phone.ParseType(strings.TrimSpace(n))
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no number type: codes could go nowhere (want some of %s)", strings.Join(phone.TypeNames(), ", "))
	}
	return out, nil
}

// ParseByTenant reads VERIFY_SMS_COUNTRIES_BY_TENANT: tenant=CN+US,…
func ParseByTenant(entries []string) (map[string]phone.Countries, error) {
	out := map[string]phone.Countries{}
	for _, e := range entries {
		tenant, codes, ok := strings.Cut(e, "=")
		tenant = strings.TrimSpace(tenant)
		if !ok || tenant == "" {
			return nil, fmt.Errorf("entry %q: want tenant=CC+CC", e)
		}
		if _, dup := out[tenant]; dup {
			return nil, fmt.Errorf("tenant %s is listed twice", tenant)
		}
		c, err := phone.ParseCountries(codes)
		if err != nil {
			return nil, fmt.Errorf("tenant %s: %w", tenant, err)
		}
		if len(c) == 0 {
			return nil, fmt.Errorf("tenant %s: no country (an empty list would mean every country; leave the tenant out for VERIFY_SMS_COUNTRIES)", tenant)
		}
		out[tenant] = c
	}
	return out, nil
}
