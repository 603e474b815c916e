package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/ivrsched/ivrsched/internal/kafkaclient"
)

// The environment variables that hold the SASL credentials unless
// --sasl-credentials names a file: secrets never go into flags, which any
// user of the machine can read in the process list.
const (
	envSASLUsername = "IVRSCHED_SASL_USERNAME"
	envSASLPassword = "IVRSCHED_SASL_PASSWORD"
)

// securityFlags are TLS and SASL to the brokers, part of kafkaFlags.
type securityFlags struct {
	tls             bool
	tlsCA           string
	tlsCert         string
	tlsKey          string
	saslMechanism   string
	saslCredentials string
	insecurePlain   bool
}

func (s *securityFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&s.tls, "tls", false, "connect to the brokers with TLS (also on when any --tls-* file is given); without --tls-ca the system's roots verify the brokers")
	fs.StringVar(&s.tlsCA, "tls-ca", "", "PEM file of the certificate authorities that sign the brokers' certificates")
	fs.StringVar(&s.tlsCert, "tls-cert", "", "PEM file of this client's certificate, for brokers that require mutual TLS (with --tls-key)")
	fs.StringVar(&s.tlsKey, "tls-key", "", "PEM file of the private key of --tls-cert")
	fs.StringVar(&s.saslMechanism, "sasl-mechanism", "", "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; the user name and password come from $"+envSASLUsername+" and $"+envSASLPassword+", or from --sasl-credentials")
	fs.BoolVar(&s.insecurePlain, "insecure-sasl-plain", false, "accept --sasl-mechanism PLAIN without TLS, which sends the password in clear to anyone on the path to the brokers (refused otherwise); run, scheduler and dialer then have it warned at start and in /readyz's warnings")
	fs.StringVar(&s.saslCredentials, "sasl-credentials", "", "file with the SASL user name and password as two lines, username=NAME and password=SECRET (instead of the environment)")
}

// set reports whether any TLS or SASL flag is given.
func (s *securityFlags) set() bool {
	return s.tls || s.tlsCA != "" || s.tlsCert != "" || s.tlsKey != "" || s.saslMechanism != "" || s.saslCredentials != "" || s.insecurePlain
}

// security reads the TLS files and the SASL credentials. Errors name the
// flag (or the environment variable) and never show a secret.
func (s *securityFlags) security() (kafkaclient.Security, error) {
	var sec kafkaclient.Security
	if s.tls || s.tlsCA != "" || s.tlsCert != "" || s.tlsKey != "" {
		cfg, err := kafkaclient.TLSFiles{CA: s.tlsCA, Cert: s.tlsCert, Key: s.tlsKey}.Load()
		var fe *kafkaclient.TLSFileError
		if errors.As(err, &fe) {
			return sec, badFlag("tls-"+fe.Which, "%v", fe)
		} else if err != nil {
			return sec, err
		}
		sec.TLS = cfg
	}
	mech := strings.ToUpper(s.saslMechanism)
	switch mech {
	case "":
		if s.insecurePlain {
			return sec, badFlag("insecure-sasl-plain", "given, but --sasl-mechanism is not PLAIN; drop it")
		}
		if s.saslCredentials != "" {
			return sec, badFlag("sasl-credentials", "given, but no --sasl-mechanism; add --sasl-mechanism PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
		}
		return sec, nil
	case kafkaclient.SASLPlain, kafkaclient.SASLScramSHA256, kafkaclient.SASLScramSHA512:
	default:
		return sec, badFlag("sasl-mechanism", "%q; want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s.saslMechanism)
	}
	if s.insecurePlain && mech != kafkaclient.SASLPlain {
		return sec, badFlag("insecure-sasl-plain", "given, but --sasl-mechanism is not PLAIN; drop it")
	}
	user, password, err := s.credentials(mech)
	if err != nil {
		return sec, err
	}
	if mech == kafkaclient.SASLPlain && sec.TLS == nil && !s.insecurePlain {
		return sec, badFlag("sasl-mechanism", "PLAIN without TLS sends the password in clear; add --tls (with --tls-ca for a private authority), use SCRAM-SHA-512, or accept the risk with --insecure-sasl-plain")
	}
	sec.SASL = kafkaclient.SASL{Mechanism: mech, User: user, Password: password}
	sec.AllowPlainWithoutTLS = s.insecurePlain
	return sec, nil
}

// credentials reads the SASL user name and password of mechanism mech
// from --sasl-credentials, or else from the environment.
func (s *securityFlags) credentials(mech string) (user, password string, err error) {
	if s.saslCredentials != "" {
		user, password, err := readCredentials(s.saslCredentials)
		if err != nil {
			return "", "", badFlag("sasl-credentials", "%v", err)
		}
		return user, password, nil
	}
	user, password = os.Getenv(envSASLUsername), os.Getenv(envSASLPassword)
	var missing []string
	if user == "" {
		missing = append(missing, "$"+envSASLUsername)
	}
	if password == "" {
		missing = append(missing, "$"+envSASLPassword)
	}
	if len(missing) > 0 {
		return "", "", badFlag("sasl-mechanism", "%s needs a user name and a password: %s not set (set %s and %s, or give --sasl-credentials FILE)",
			mech, strings.Join(missing, " and "), envSASLUsername, envSASLPassword)
	}
	return user, password, nil
}

// readCredentials reads a credentials file: lines username=NAME and
// password=SECRET (everything after the = is the value); blank lines and
// lines starting with # are skipped. Its
// errors never quote the file's content.
func readCredentials(path string) (user, password string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), "\r")
		if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		// The value is taken as it is: a password may begin or end with a space.
		key, value, ok := strings.Cut(line, "=")
		switch key = strings.TrimSpace(key); {
		case ok && key == "username":
			user = value
		case ok && key == "password":
			password = value
		default:
			return "", "", fmt.Errorf("%s line %d: want username=NAME or password=SECRET", path, n)
		}
	}
	if err := sc.Err(); err != nil {
		return "", "", fmt.Errorf("%s: %w", path, err)
	}
	switch {
	case user == "":
		return "", "", fmt.Errorf("%s has no username=NAME line", path)
	case password == "":
		return "", "", fmt.Errorf("%s has no password=SECRET line", path)
	}
	return user, password, nil
}
