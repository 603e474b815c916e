// Package redact masks phone numbers in what operators see (the CLI's dead
// letters, the web page), keeping the last two digits so that a number can
// still be told apart from another.
package redact

import (
	"regexp"
	"strings"
)

// digits finds phone-like runs: a + followed by 4 digits or more (a number
// too short to be valid is still someone's typing; a country code such as
// +44 stays), a + followed by digits, spaces, dashes, dots or parentheses,
// or 7 digits or more in a row (dates and times stay).
var digits = regexp.MustCompile(`\+\d{4,}|\+\d[\d ().-]{4,}\d|\d{7,}`)

// Phone masks a phone number: every digit but the last two becomes '•'; a
// leading + stays. "" stays "".
func Phone(s string) string {
	n := 0
	for _, r := range s {
		if r >= '0' && r <= '9' {
			n++
		}
	}
	var b strings.Builder
	seen := 0
	for _, r := range s {
		if r >= '0' && r <= '9' {
			seen++
			if seen <= n-2 {
				b.WriteRune('•')
				continue
			}
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Text masks every phone-like run of digits in s (a dead letter's detail
// may quote the number it refused).
func Text(s string) string { return digits.ReplaceAllStringFunc(s, Phone) }
