// Package ivrsched carries the product's samples in testdata/ into the
// binary, so that `ivrsched run --demo` works from any directory. It has no
// other use: the contract for clients is package codec.
package ivrsched

import _ "embed"

// DemoOnboarding is testdata/demo-onboarding.jsonl: the sample onboarding
// commands that `ivrsched run --demo` feeds, one protojson Command per line.
//
//go:embed testdata/demo-onboarding.jsonl
var DemoOnboarding []byte
