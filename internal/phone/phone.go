// Package phone checks phone numbers against the numbering plan and finds
// the region and the time zones of a number, with libphonenumber's metadata
// (github.com/nyaruka/phonenumbers).
//
// It replaces a syntax-only E.164 check: +15555550100 has the shape of an
// E.164 number, but no such area code exists. A number the plan rejects
// gets an *InvalidError whose Reason says why, for the scheduler's
// dead letter (reason invalid_phone). So do the number types no automated
// call may dial: premium-rate, shared-cost, personal and UAN numbers.
//
// The functions are safe for concurrent use.
package phone

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nyaruka/phonenumbers"
)

// ErrInvalid is what every *InvalidError matches with errors.Is.
var ErrInvalid = errors.New("invalid phone number")

// InvalidError says why a number is not a valid E.164 number of the
// numbering plan.
type InvalidError struct {
	Number string
	Reason string // a sentence fragment, e.g. "country code +999 is not assigned"
}

func (e *InvalidError) Error() string { return fmt.Sprintf("phone %q: %s", e.Number, e.Reason) }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// Number is a valid phone number.
type Number struct {
	// E164 is the number in E.164 form: + and up to 15 digits.
	E164 string
	// Region is the ISO 3166-1 alpha-2 code of the number's region ("US",
	// "DE"), or "001" for a non-geographic number (+800 freephone, +882
	// networks).
	Region string
	// Zones are the IANA time zones the numbering plan gives for the
	// number (corrected where it is wrong for a whole region, see
	// zoneOverrides), sorted: one for most numbers, several for a number whose
	// prefix spans zones (a US toll-free number gets every zone of country
	// code +1), none for a non-geographic number.
	Zones []string
}

// Parse checks that s is an E.164 number ("+" and digits, no spaces) that
// the numbering plan knows, and returns it with its region and zones.
func Parse(s string) (Number, error) {
	if n, ok := parsed.Load(s); ok {
		return n.(Number), nil
	}
	n, err := parse(s)
	if err != nil {
		return Number{}, err
	}
	if count.Add(1) <= maxCached {
		parsed.Store(s, n)
	}
	return n, nil
}

func parse(s string) (Number, error) {
	invalid := func(format string, args ...any) (Number, error) {
		return Number{}, &InvalidError{Number: s, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case s == "":
		return invalid("empty")
	case s[0] != '+' || len(s) < 2 || strings.Trim(s[1:], "0123456789") != "":
		return invalid("not in E.164 form: a + then the country code and number, digits only, like +14155550123")
	case s[1] == '0':
		return invalid("no country code starts with 0")
	case len(s) > 16:
		return invalid("%d digits, E.164 allows at most 15", len(s)-1)
	}
	num, err := phonenumbers.Parse(s, "")
	switch {
	case errors.Is(err, phonenumbers.ErrInvalidCountryCode):
		return invalid("no country has the calling code at the start of this number")
	case errors.Is(err, phonenumbers.ErrTooShortNSN), errors.Is(err, phonenumbers.ErrNotANumber):
		return invalid("too short to be a phone number")
	case err != nil:
		return invalid("%v", err)
	}
	cc := num.GetCountryCode()
	switch phonenumbers.IsPossibleNumberWithReason(num) {
	case phonenumbers.INVALID_COUNTRY_CODE:
		return invalid("country code +%d is not assigned", cc)
	case phonenumbers.TOO_SHORT:
		return invalid("too short for country code +%d", cc)
	case phonenumbers.TOO_LONG:
		return invalid("too long for country code +%d", cc)
	case phonenumbers.INVALID_LENGTH:
		return invalid("no number of country code +%d has this length", cc)
	case phonenumbers.IS_POSSIBLE_LOCAL_ONLY:
		return invalid("a local number without its area code, which cannot be dialled from abroad")
	}
	if !phonenumbers.IsValidNumber(num) {
		return invalid("not a number of the numbering plan of country code +%d (no such area code or number range)", cc)
	}
	if e := phonenumbers.Format(num, phonenumbers.E164); e != s {
		return invalid("not in canonical E.164 form (no national trunk prefix): write %s", e)
	}
	if why, ok := refusedTypes[phonenumbers.GetNumberType(num)]; ok {
		return invalid("%s, which an automated call must not dial", why)
	}
	region := phonenumbers.GetRegionCodeForNumber(num)
	var zones []string
	if z, ok := overriddenZone(s); ok {
		zones = []string{z}
	} else if tzs, err := phonenumbers.GetTimezonesForNumber(num); err == nil {
		for _, z := range tzs {
			if z != phonenumbers.UNKNOWN_TIMEZONE && z != "" {
				zones = append(zones, z)
			}
		}
	}
	return Number{E164: s, Region: region, Zones: zones}, nil
}

// refusedTypes are the number types no follow-up call goes to, and why:
// the caller pays a premium or a share of the cost, or the number is
// forwarded to wherever whoever rents it chooses (personal numbers, +44
// 70; UAN numbers). An onboarding command is an instruction to dial, and
// the operator's account pays.
var refusedTypes = map[phonenumbers.PhoneNumberType]string{
	phonenumbers.PREMIUM_RATE:    "a premium-rate number",
	phonenumbers.SHARED_COST:     "a shared-cost number",
	phonenumbers.PERSONAL_NUMBER: "a personal (forwarding) number",
	phonenumbers.UAN:             "a UAN (universal access) number",
}

// The parse cache: numbers repeat (every command of a user carries the
// phone), and parsing costs microseconds. Bounded; past the bound numbers
// are parsed each time.
const maxCached = 1 << 16

var (
	parsed sync.Map // string → Number
	count  atomic.Int64
)
