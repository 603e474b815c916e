package twilio

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
)

// The names of the credentials, in the environment or a credentials file.
const (
	EnvAccountSID = "TWILIO_ACCOUNT_SID"
	EnvAuthToken  = "TWILIO_AUTH_TOKEN"
)

// LoadCredentials returns the account SID and auth token: from file if it
// is not empty (lines NAME=value, # comments, an optional "export " and
// quotes, as in a shell or systemd environment file), else from the
// environment (getenv). They are never taken from a flag, which other users
// of the machine could read in the process list.
func LoadCredentials(file string, getenv func(string) string) (sid, token string, err error) {
	get := getenv
	from := "the environment"
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", "", fmt.Errorf("%w: credentials file: %w", ErrTwilio, err)
		}
		vals := map[string]string{}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
			if !ok {
				return "", "", fmt.Errorf("%w: credentials file %s: a line is not NAME=value", ErrTwilio, file)
			}
			vals[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"'`)
		}
		get = func(k string) string { return vals[k] }
		from = "credentials file " + file
	}
	sid, token = get(EnvAccountSID), get(EnvAuthToken)
	if sid == "" || token == "" {
		return "", "", fmt.Errorf("%w: %s and %s must both be set in %s", ErrTwilio, EnvAccountSID, EnvAuthToken, from)
	}
	return sid, token, nil
}
