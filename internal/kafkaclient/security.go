package kafkaclient

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"
)

// Security is how ivrsched's clients protect their connections to the
// brokers: TLS and SASL. The zero value is plaintext without
// authentication. Kafka.Sarama applies it to every client (processors,
// emitters, views, the cluster admin, Connect).
type Security struct {
	// TLS, when not nil, encrypts every connection and verifies the
	// brokers' certificates; with a client certificate it also presents
	// this process to the brokers (mutual TLS). TLSFiles.Load builds it
	// from PEM files. Each client gets a clone.
	TLS *tls.Config
	// SASL authenticates this process to the brokers; the zero value does
	// not.
	SASL SASL
	// AllowPlainWithoutTLS accepts SASL PLAIN without TLS, which sends
	// the password in clear to anyone on the path to the brokers;
	// Validate refuses that combination without it.
	AllowPlainWithoutTLS bool
}

// SASL is a SASL mechanism and its credentials.
type SASL struct {
	// Mechanism is SASLPlain, SASLScramSHA256, SASLScramSHA512, or empty for
	// no SASL.
	Mechanism string
	User      string
	Password  string
}

// The SASL mechanisms ivrsched speaks.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// SASLMechanisms lists the accepted values of SASL.Mechanism.
var SASLMechanisms = []string{SASLPlain, SASLScramSHA256, SASLScramSHA512}

// ErrAuthentication reports brokers that refused this process's SASL
// credentials or mechanism.
var ErrAuthentication = errors.New("SASL authentication failed")

// Validate checks the settings: a known mechanism with a user and a
// password, or no mechanism and no credentials; SASL PLAIN only over TLS
// or with AllowPlainWithoutTLS.
func (s Security) Validate() error {
	switch s.SASL.Mechanism {
	case "":
		if s.SASL.User != "" || s.SASL.Password != "" {
			return fmt.Errorf("%w: SASL credentials without a SASL mechanism (want one of %v)", ErrConfig, SASLMechanisms)
		}
		return nil
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
	default:
		return fmt.Errorf("%w: SASL mechanism %q (want one of %v)", ErrConfig, s.SASL.Mechanism, SASLMechanisms)
	}
	switch {
	case s.SASL.User == "":
		return fmt.Errorf("%w: SASL %s without a user name", ErrConfig, s.SASL.Mechanism)
	case s.SASL.Password == "":
		return fmt.Errorf("%w: SASL %s without a password", ErrConfig, s.SASL.Mechanism)
	case s.SASL.Mechanism == SASLPlain && s.TLS == nil && !s.AllowPlainWithoutTLS:
		return fmt.Errorf("%w: SASL PLAIN without TLS would send the password in clear (enable TLS, use SCRAM, or accept the risk with AllowPlainWithoutTLS)", ErrConfig)
	}
	return nil
}

// Warnings are what the settings allow but an operator should fix: SASL
// PLAIN without TLS (AllowPlainWithoutTLS), which sends the password in
// clear. The caller logs them at start and lists them in /readyz.
func (s Security) Warnings() []string {
	if s.SASL.Mechanism == SASLPlain && s.TLS == nil && s.AllowPlainWithoutTLS {
		return []string{"SASL PLAIN without TLS sends the Kafka password in clear to anyone on the path to the brokers (--insecure-sasl-plain): add --tls, or use SCRAM-SHA-512"}
	}
	return nil
}

// apply sets the TLS and SASL parts of a Sarama configuration.
func (s Security) apply(c *sarama.Config) {
	if s.TLS != nil {
		c.Net.TLS.Enable = true
		c.Net.TLS.Config = s.TLS.Clone()
	}
	if s.SASL.Mechanism == "" {
		return
	}
	c.Net.SASL.Enable = true
	c.Net.SASL.Handshake = true
	c.Net.SASL.Mechanism = sarama.SASLMechanism(s.SASL.Mechanism)
	c.Net.SASL.User = s.SASL.User
	c.Net.SASL.Password = s.SASL.Password
	switch s.SASL.Mechanism {
	case SASLScramSHA256:
		c.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.SHA256} }
	case SASLScramSHA512:
		c.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.SHA512} }
	}
}

// authError turns the brokers' refusal of the SASL handshake into
// ErrAuthentication, naming the mechanism and the user; other errors give
// nil.
func (s Security) authError(brokers string, err error) error {
	switch {
	case errors.Is(err, sarama.ErrSASLAuthenticationFailed):
		return fmt.Errorf("%w at %s (%s as user %q): check the credentials: %w", ErrAuthentication, brokers, s.SASL.Mechanism, s.SASL.User, err)
	case errors.Is(err, sarama.ErrUnsupportedSASLMechanism):
		return fmt.Errorf("%w at %s: the brokers do not accept SASL %s: %w", ErrAuthentication, brokers, s.SASL.Mechanism, err)
	}
	return nil
}

// hint says what a failed connection may mean: some brokers close it
// instead of answering a refused SASL handshake, and a broker that
// requires a client certificate closes it, or sends a TLS alert, when
// there is none.
func (s Security) hint(err error) string {
	closed := errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
	msg := err.Error()
	certRefused := strings.Contains(msg, "remote error: tls: bad certificate") || strings.Contains(msg, "remote error: tls: certificate required")
	var maybe []string
	if closed && s.SASL.Mechanism != "" {
		maybe = append(maybe, fmt.Sprintf("if the brokers closed the connection because they refused SASL %s as user %q, check the credentials", s.SASL.Mechanism, s.SASL.User))
	}
	if (closed || certRefused) && s.TLS != nil && len(s.TLS.Certificates) == 0 && s.TLS.GetClientCertificate == nil {
		maybe = append(maybe, "if the brokers require a client certificate (mutual TLS), give one")
	}
	if len(maybe) == 0 {
		return ""
	}
	return " (" + strings.Join(maybe, "; ") + ")"
}

// scramClient is sarama's SCRAMClient on github.com/xdg-go/scram. Sarama
// makes one per connection and calls it from that connection's goroutine.
type scramClient struct {
	hash scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

func (c *scramClient) Begin(user, password, authzID string) error {
	cl, err := c.hash.NewClient(user, password, authzID)
	if err != nil {
		return err
	}
	c.conv = cl.NewConversation()
	return nil
}

func (c *scramClient) Step(challenge string) (string, error) { return c.conv.Step(challenge) }

func (c *scramClient) Done() bool { return c.conv.Done() }

// TLSFiles names the PEM files of a TLS configuration. Each may be empty:
// without CA the system's roots verify the brokers; Cert and Key, the
// client certificate for mutual TLS, come together or not at all.
type TLSFiles struct {
	CA, Cert, Key string
}

// TLSFileError reports a TLS file that cannot be used. Which is "ca",
// "cert" or "key".
type TLSFileError struct {
	Which, Path string
	Err         error
}

func (e *TLSFileError) Error() string {
	return fmt.Sprintf("TLS %s file %s: %v", e.Which, e.Path, e.Err)
}

func (e *TLSFileError) Unwrap() error { return e.Err }

// Load reads the files and returns the TLS configuration of the clients
// (TLS 1.2 or newer). Errors are *TLSFileError.
func (f TLSFiles) Load() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, &TLSFileError{"ca", f.CA, err}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &TLSFileError{"ca", f.CA, errors.New("no PEM certificate in it")}
		}
		cfg.RootCAs = pool
	}
	switch {
	case f.Cert == "" && f.Key == "":
		return cfg, nil
	case f.Key == "":
		return nil, &TLSFileError{"key", f.Key, errors.New("a client certificate needs its private key")}
	case f.Cert == "":
		return nil, &TLSFileError{"cert", f.Cert, errors.New("a private key needs its client certificate")}
	}
	certPEM, err := os.ReadFile(f.Cert)
	if err != nil {
		return nil, &TLSFileError{"cert", f.Cert, err}
	}
	if !hasPEM(certPEM, "CERTIFICATE") {
		return nil, &TLSFileError{"cert", f.Cert, errors.New("no PEM certificate in it")}
	}
	keyPEM, err := os.ReadFile(f.Key)
	if err != nil {
		return nil, &TLSFileError{"key", f.Key, err}
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, &TLSFileError{"key", f.Key, fmt.Errorf("does not go with certificate %s: %w", f.Cert, err)}
	}
	cfg.Certificates = []tls.Certificate{pair}
	return cfg, nil
}

func hasPEM(data []byte, blockType string) bool {
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			return false
		} else if b.Type == blockType {
			return true
		}
	}
}
