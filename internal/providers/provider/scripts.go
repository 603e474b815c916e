package provider

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// ErrScript is wrapped by the error of a call whose script (its action's
// ivr_script) the provider refuses to pass on. The call fails for good.
var ErrScript = errors.New("script refused")

// ScriptKind is what a script is.
type ScriptKind int

// The kinds of script.
const (
	// ScriptName names a script the provider's configuration locates
	// (Twilio: --twilio-script-url).
	ScriptName ScriptKind = iota
	// ScriptInline is the script itself: TwiML ("<Response>…").
	ScriptInline
	// ScriptURL is where the script is: an https URL.
	ScriptURL
)

// Scripts says which scripts a provider passes on. Every command on the
// onboarding topic names the script its calls play, so a script that is
// TwiML or a URL would let whoever writes there make the operator's
// account play anything and dial anywhere (<Dial>, <Gather action=…>).
// The zero value passes names only.
type Scripts struct {
	// Inline passes TwiML ("<…") as the script itself; every URL it
	// contains must be https on one of URLHosts.
	Inline bool
	// URLHosts are the hosts of the https URLs a script may be (exact
	// names, with a port if the URL has one); empty: no URL.
	URLHosts []string
}

// anyURL finds the URLs in inline TwiML.
var anyURL = regexp.MustCompile(`(?i)[a-z][a-z0-9+.-]*://[^\s"'<>]*`)

// Check says what script s is, or why it is refused (an error wrapping
// ErrScript): TwiML unless Inline, a URL unless https on one of
// URLHosts. Anything else is a name ("" too: the provider says whether it
// has a default script).
func (c Scripts) Check(s string) (ScriptKind, error) {
	s = strings.TrimSpace(s)
	switch {
	case strings.HasPrefix(s, "<"):
		if !c.Inline {
			return 0, fmt.Errorf("%w: the script is inline TwiML, which is refused without --allow-inline-scripts", ErrScript)
		}
		for _, u := range anyURL.FindAllString(s, -1) {
			if err := c.url(u); err != nil {
				return 0, fmt.Errorf("%w (in the inline TwiML)", err)
			}
		}
		return ScriptInline, nil
	case strings.Contains(s, "://"):
		if err := c.url(s); err != nil {
			return 0, err
		}
		return ScriptURL, nil
	}
	return ScriptName, nil
}

func (c Scripts) url(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil:
		return fmt.Errorf("%w: %.100q is not an https URL", ErrScript, s)
	case !slices.Contains(c.URLHosts, strings.ToLower(u.Host)):
		return fmt.Errorf("%w: host %q of a script URL is not in --script-url-hosts", ErrScript, u.Host)
	}
	return nil
}
