package policy

import (
	"strings"
	"testing"
)

// A campaign override may exempt its calls from the do-not-call list; the
// default may not, an unnamed or unknown campaign is never exempt, and the
// field survives the canonical encoding.
func TestSuppressionExempt(t *testing.T) {
	p, err := Parse([]byte("campaigns:\n  emergency: {suppression_exempt: true}\n  reminder: {spread: 5m}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for campaign, want := range map[string]bool{"emergency": true, "reminder": false, "": false, "other": false} {
		if got := p.SuppressionExempt(campaign); got != want {
			t.Errorf("SuppressionExempt(%q) = %v, want %v", campaign, got, want)
		}
	}
	q, err := Decode(p.Encode())
	if err != nil || !q.SuppressionExempt("emergency") || q.Version() != p.Version() {
		t.Errorf("decoded again: exempt %v, version %s vs %s, err %v", q.SuppressionExempt("emergency"), q.Version(), p.Version(), err)
	}
	if Default().Version() != mustParse(t, "{}").Version() {
		t.Error("the default policy's version changed")
	}
	var nilPolicy *Policy
	if nilPolicy.SuppressionExempt("emergency") {
		t.Error("a nil policy exempts a campaign")
	}
	for doc, want := range map[string]string{
		"default: {suppression_exempt: true}\n":      "default.suppression_exempt",
		"campaigns:\n  a: {suppression_exempt: 1}\n": "not a boolean",
	} {
		_, err := Parse([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", doc, err, want)
		}
	}
}
