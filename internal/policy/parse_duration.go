package policy

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Durations, as the policy writes them (spread, cap.per, retry delays and
// ages): Go's form (10m, 1h30m, 24h) or whole days (7d), in whole seconds,
// not negative. Each field checks its own range.

// daysForm matches a number of whole days, which Go's form lacks.
var daysForm = regexp.MustCompile(`^([0-9]+)d$`)

// durationForm is the form of a duration, as problems show it.
const durationForm = `accepted: a duration such as 10m, 1h30m, 24h or 7d (d = 24h), in whole seconds`

// duration reads a duration (ParseDuration); the caller checks its range.
func (ps *parser) duration(path string, n *yaml.Node) (time.Duration, bool) {
	n = deref(n)
	if n == nil || n.Kind != yaml.ScalarNode || isNull(n) {
		ps.fail(path, n, "%s is not a duration; %s", describe(n), durationForm)
		return 0, false
	}
	d, err := ParseDuration(n.Value)
	if err != nil {
		ps.fail(path, n, "%s is not a duration; %s", describe(n), durationForm)
		return 0, false
	}
	return d, true
}

// ParseDuration reads a duration as the policy writes it: Go's form (10m,
// 1h30m, 24h) or whole days (7d, a day being 24 h), in whole seconds, not
// negative.
func ParseDuration(s string) (time.Duration, error) {
	var d time.Duration
	if m := daysForm.FindStringSubmatch(s); m != nil {
		n, err := strconv.Atoi(m[1])
		if err != nil || n > 100000 {
			return 0, fmt.Errorf("%q: too many days", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, err
		}
	}
	if d < 0 || d%time.Second != 0 {
		return 0, fmt.Errorf("%q: negative or not whole seconds", s)
	}
	return d, nil
}

// formatDuration writes a duration in the form ParseDuration reads,
// shortest first: 7d, 24h written as 1d, 1h30m, 10m, 45s.
func formatDuration(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
