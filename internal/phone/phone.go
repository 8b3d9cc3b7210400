// Package phone parses the phone numbers msgpulse sends SMS to, with
// Google's libphonenumber metadata (github.com/nyaruka/phonenumbers):
// whether a number is one its country assigns, of which type (mobile,
// premium-rate, toll-free...), in which country, and its canonical E.164
// form, the one every key, limit and send uses.
//
// It is a leaf: it knows numbers, not tenants, settings or Redis. It must
// never accept a number the metadata says no country assigns, and never
// return two forms for one number (a sidestep of every per-recipient
// limit).
package phone

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nyaruka/phonenumbers"
)

// Type is a number's type, as the metadata of its country says.
type Type uint8

// The types, in libphonenumber's terms. FixedLineOrMobile is a number of a
// country whose plan does not tell the two apart (the United States,
// Canada among others): SMS reaches most of them.
const (
	Unknown Type = iota
	FixedLine
	Mobile
	FixedLineOrMobile
	TollFree
	PremiumRate
	SharedCost
	VoIP
	PersonalNumber
	Pager
	UAN
	Voicemail
)

var types = []struct {
	t          Type
	lib        phonenumbers.PhoneNumberType
	name, desc string
}{
	{FixedLine, phonenumbers.FIXED_LINE, "fixed_line", "fixed-line"},
	{Mobile, phonenumbers.MOBILE, "mobile", "mobile"},
	{FixedLineOrMobile, phonenumbers.FIXED_LINE_OR_MOBILE, "fixed_line_or_mobile", "fixed-line-or-mobile"},
	{TollFree, phonenumbers.TOLL_FREE, "toll_free", "toll-free"},
	{PremiumRate, phonenumbers.PREMIUM_RATE, "premium_rate", "premium-rate"},
	{SharedCost, phonenumbers.SHARED_COST, "shared_cost", "shared-cost"},
	{VoIP, phonenumbers.VOIP, "voip", "VoIP"},
	{PersonalNumber, phonenumbers.PERSONAL_NUMBER, "personal_number", "personal (follow-me)"},
	{Pager, phonenumbers.PAGER, "pager", "pager"},
	{UAN, phonenumbers.UAN, "uan", "universal access (UAN)"},
	{Voicemail, phonenumbers.VOICEMAIL, "voicemail", "voicemail access"},
}

// String is the type's name as settings spell it (premium_rate).
func (t Type) String() string {
	for _, x := range types {
		if x.t == t {
			return x.name
		}
	}
	return "unknown"
}

// Describe is the type in words, for messages (premium-rate).
func (t Type) Describe() string {
	for _, x := range types {
		if x.t == t {
			return x.desc
		}
	}
	return "unknown"
}

// TypeNames lists every type's name, for help texts.
func TypeNames() []string {
	out := make([]string, len(types))
	for i, x := range types {
		out[i] = x.name
	}
	return out
}

// ParseType reads a type's name (mobile, premium_rate...).
func ParseType(name string) (Type, error) {
	for _, x := range types {
		if x.name == name {
			return x.t, nil
		}
	}
	return Unknown, fmt.Errorf("unknown number type %q (want one of %s)", name, strings.Join(TypeNames(), ", "))
}

func fromLib(t phonenumbers.PhoneNumberType) Type {
	for _, x := range types {
		if x.lib == t {
			return x.t
		}
	}
	return Unknown
}

// Number is a parsed, valid number.
type Number struct {
	// E164 is the canonical form (+447400123456): what keys, limits and
	// the SMS vendor get.
	E164 string
	// CallingCode is the country calling code (44).
	CallingCode int
	// National is the national significant number (7400123456).
	National string
	// Region is the ISO 3166-1 alpha-2 code of the number's country (GB),
	// or "001" for a non-geographic number (+800, +882...).
	Region string
	Type   Type
}

// ErrInvalid is matched (errors.Is) by every error of Parse.
var ErrInvalid = errors.New("phone: invalid number")

// InvalidError says why a number is refused, in words a caller can act on.
type InvalidError struct{ Why string }

func (e *InvalidError) Error() string { return e.Why }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(format string, args ...any) error {
	return &InvalidError{Why: fmt.Sprintf(format, args...)}
}

// Parse reads an international number: "+" then the country calling code
// and the national number, with optional spaces, dots, hyphens and
// parentheses (+44 7400 123456, +1 (415) 555-2671). Letters, extensions
// and national forms (without "+") are refused: the API knows no default
// country. The number must be one its country's numbering plan assigns
// (libphonenumber's IsValidNumber), not merely of a possible length.
func Parse(s string) (Number, error) {
	if !strings.HasPrefix(s, "+") {
		return Number{}, invalid("must be an E.164 number: + and the country calling code, such as +8613900001234")
	}
	digits := 0
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == ' ' || c == '-' || c == '.' || c == '(' || c == ')':
		default:
			return Number{}, invalid("may hold only digits after the +, with spaces, dots, hyphens or parentheses between them")
		}
	}
	if digits < 3 || digits > 17 {
		return Number{}, invalid("must have 3 to 17 digits, the country calling code included")
	}
	num, err := phonenumbers.Parse(s, "")
	if errors.Is(err, phonenumbers.ErrInvalidCountryCode) {
		return Number{}, invalid("starts with no country's calling code")
	}
	if err != nil {
		return Number{}, invalid("is not a phone number: %v", err)
	}
	cc := int(num.GetCountryCode())
	home := phonenumbers.GetRegionCodeForCountryCode(cc)
	if home == "ZZ" {
		return Number{}, invalid("starts with no country's calling code")
	}
	n := Number{CallingCode: cc, National: phonenumbers.GetNationalSignificantNumber(num)}
	n.Type = fromLib(phonenumbers.GetNumberType(num))
	if n.Type == Unknown {
		where := home
		switch phonenumbers.IsPossibleNumberWithReason(num) {
		case phonenumbers.TOO_SHORT:
			return Number{}, invalid("is too short for a number of %s (+%d)", where, cc)
		case phonenumbers.TOO_LONG:
			return Number{}, invalid("is too long for a number of %s (+%d)", where, cc)
		case phonenumbers.INVALID_LENGTH:
			return Number{}, invalid("has a length no number of %s (+%d) has", where, cc)
		}
		return Number{}, invalid("is not a number %s (+%d) assigns: %s matches none of its number ranges", where, cc, n.National)
	}
	n.Region = phonenumbers.GetRegionCodeForNumber(num)
	if n.Region == "" {
		n.Region = home
	}
	n.E164 = "+" + strconv.Itoa(cc) + n.National
	return n, nil
}

// NonGeographic is the region of numbers of no country: satellite phones
// (+881 Iridium and Globalstar, +870 Inmarsat), international networks
// (+882, +883) and the like. They are classic high-cost destinations of SMS
// pumping, so a set of countries admits them only when it names "001"
// (issue 43): "every country" is every country, not these.
const NonGeographic = "001"

// Countries is a set of ISO 3166-1 alpha-2 codes, and NonGeographic;
// empty means every country (and not NonGeographic).
type Countries []string

// ParseCountries reads codes joined by "+" (CN+HK+SG), as the settings
// spell them; "" is every country. A code libphonenumber does not know is
// an error, so that a typo cannot silently forbid a country.
func ParseCountries(s string) (Countries, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	known := phonenumbers.GetSupportedRegions()
	var out Countries
	for part := range strings.SplitSeq(s, "+") {
		c := strings.ToUpper(strings.TrimSpace(part))
		if !known[c] && c != NonGeographic {
			return nil, fmt.Errorf("%q is not an ISO 3166-1 alpha-2 country code with a numbering plan, nor 001 (numbers of no country)", part)
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Allows reports whether region is in the set (every country, when it is
// empty). A number of no country (NonGeographic, or no region at all) is
// allowed only by a set that names NonGeographic.
func (c Countries) Allows(region string) bool {
	if region == NonGeographic || region == "" || region == "ZZ" {
		return slices.Contains(c, NonGeographic)
	}
	return len(c) == 0 || slices.Contains(c, region)
}

// String joins the codes with "+", as they are set.
func (c Countries) String() string { return strings.Join(c, "+") }
