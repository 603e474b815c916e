package kafkaclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ivrsched/ivrsched/internal/kafkatest"
)

func TestSecurityValidate(t *testing.T) {
	k := Kafka{Hasher: fnv.New32a, Brokers: []string{"127.0.0.1:9092"}, Partitions: 1, Replication: 1}
	for _, c := range []struct {
		sasl SASL
		want string // "" = valid
	}{
		{SASL{}, ""},
		{SASL{Mechanism: SASLPlain, User: "u", Password: "pw-secret"}, "SASL PLAIN without TLS"}, // TestSASLPlainNeedsTLS
		{SASL{Mechanism: SASLScramSHA256, User: "u", Password: "p"}, ""},
		{SASL{Mechanism: SASLScramSHA512, User: "u", Password: "p"}, ""},
		{SASL{Mechanism: "GSSAPI", User: "u", Password: "p"}, `SASL mechanism "GSSAPI"`},
		{SASL{Mechanism: SASLScramSHA512, Password: "p"}, "without a user name"},
		{SASL{Mechanism: SASLPlain, User: "u"}, "without a password"},
		{SASL{User: "u", Password: "p"}, "without a SASL mechanism"},
	} {
		k.Security.SASL = c.sasl
		err := k.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v, want valid", c.sasl, err)
		case c.want != "" && (!errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: %v, want ErrConfig containing %q", c.sasl, err, c.want)
		case c.want != "" && c.sasl.Password != "" && strings.Contains(err.Error(), c.sasl.Password):
			t.Errorf("%+v: error %q shows the password", c.sasl, err)
		}
	}
}

// SASL PLAIN sends the password as it is: it is refused without TLS
// unless the configuration accepts the risk in so many words. SCRAM,
// which never sends the password, needs no TLS.
func TestSASLPlainNeedsTLS(t *testing.T) {
	plain := SASL{Mechanism: SASLPlain, User: "u", Password: "plain-secret"}
	for _, c := range []struct {
		sec  Security
		want string // "" = valid
	}{
		{Security{SASL: plain}, "SASL PLAIN without TLS"},
		{Security{SASL: plain, TLS: &tls.Config{}}, ""},
		{Security{SASL: plain, AllowPlainWithoutTLS: true}, ""},
		{Security{SASL: SASL{Mechanism: SASLScramSHA512, User: "u", Password: "p"}}, ""},
	} {
		k := Kafka{Hasher: fnv.New32a, Brokers: []string{"127.0.0.1:9092"}, Partitions: 1, Replication: 1, Security: c.sec}
		err := k.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s, TLS %v, allowed %v: %v, want valid", c.sec.SASL.Mechanism, c.sec.TLS != nil, c.sec.AllowPlainWithoutTLS, err)
		case c.want != "" && (!errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s, TLS %v: %v, want ErrConfig containing %q", c.sec.SASL.Mechanism, c.sec.TLS != nil, err, c.want)
		case err != nil && strings.Contains(err.Error(), "plain-secret"):
			t.Errorf("error %q shows the password", err)
		}
	}
}

// Every client config carries the security settings, and a TLS config of
// its own (clients must not share one they might modify).
func TestSaramaAppliesSecurity(t *testing.T) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: "kafka"}
	k := Kafka{Hasher: fnv.New32a, Brokers: []string{"127.0.0.1:9092"}, Security: Security{TLS: tc, SASL: SASL{Mechanism: SASLScramSHA512, User: "u", Password: "p"}}}
	a, b := k.Sarama(), k.Sarama()
	if !a.Net.TLS.Enable || a.Net.TLS.Config == nil || a.Net.TLS.Config.ServerName != "kafka" {
		t.Fatalf("TLS not applied: %+v", a.Net.TLS)
	}
	if a.Net.TLS.Config == tc || a.Net.TLS.Config == b.Net.TLS.Config {
		t.Fatal("clients share one tls.Config")
	}
	if !a.Net.SASL.Enable || a.Net.SASL.Mechanism != "SCRAM-SHA-512" || a.Net.SASL.User != "u" || a.Net.SASL.SCRAMClientGeneratorFunc == nil {
		t.Fatalf("SASL not applied: %+v", a.Net.SASL)
	}
	if err := a.Validate(); err != nil {
		t.Fatalf("sarama rejects the config: %v", err)
	}
	if plain := (Kafka{Hasher: fnv.New32a, Brokers: k.Brokers}).Sarama(); plain.Net.TLS.Enable || plain.Net.SASL.Enable {
		t.Fatal("zero Security enables TLS or SASL")
	}
}

func TestTLSFilesLoad(t *testing.T) {
	certs, err := kafkatest.WriteCerts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := TLSFiles{CA: certs.CA, Cert: certs.ClientCert, Key: certs.ClientKey}.Load()
	if err != nil || cfg.RootCAs == nil || len(cfg.Certificates) != 1 || cfg.MinVersion < tls.VersionTLS12 {
		t.Fatalf("Load = %+v, %v", cfg, err)
	}
	if cfg, err := (TLSFiles{}).Load(); err != nil || cfg.RootCAs != nil {
		t.Fatalf("no files: %+v, %v; want system roots", cfg, err)
	}
	missing := filepath.Join(t.TempDir(), "missing.pem")
	junk := filepath.Join(t.TempDir(), "junk.pem")
	if err := os.WriteFile(junk, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		files TLSFiles
		which string
	}{
		{TLSFiles{CA: missing}, "ca"},
		{TLSFiles{CA: junk}, "ca"},
		{TLSFiles{Cert: certs.ClientCert}, "key"},
		{TLSFiles{Key: certs.ClientKey}, "cert"},
		{TLSFiles{Cert: junk, Key: certs.ClientKey}, "cert"},
		{TLSFiles{Cert: certs.ClientCert, Key: missing}, "key"},
		{TLSFiles{Cert: certs.ClientCert, Key: certs.ServerKey}, "key"}, // not its key
	} {
		_, err := c.files.Load()
		var fe *TLSFileError
		if !errors.As(err, &fe) || fe.Which != c.which {
			t.Errorf("%+v: %v, want a TLSFileError about the %s file", c.files, err, c.which)
		}
	}
}

// TLS and each SASL mechanism against a Kafka-protocol broker that speaks
// them (franz-go's kfake, an implementation of its own): right credentials
// connect; a wrong password fails at once, saying to check the
// credentials (kfake closes the connection where Apache Kafka answers
// SASL_AUTHENTICATION_FAILED: systemtest's TestSASLSSL checks that
// ErrAuthentication); a broker certificate from another authority fails
// as unreachable with the verification error.
func TestConnectTLSAndSASL(t *testing.T) {
	certs, err := kafkatest.WriteCerts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := certs.ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(serverTLS),
		kfake.EnableSASL(),
		kfake.Superuser(SASLPlain, "plain-user", "plain-secret"),
		kfake.Superuser(SASLScramSHA256, "scram256-user", "scram256-secret"),
		kfake.Superuser(SASLScramSHA512, "scram512-user", "scram512-secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	clientTLS, err := TLSFiles{CA: certs.CA}.Load()
	if err != nil {
		t.Fatal(err)
	}
	connect := func(sec Security) (time.Duration, error) {
		k := Kafka{Hasher: fnv.New32a, Brokers: c.ListenAddrs(), Partitions: 1, Replication: 1, DialTimeout: 5 * time.Second, Security: sec}
		if err := k.Validate(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		cl, err := k.Connect(context.Background())
		if err == nil {
			cl.Close()
		}
		return time.Since(start), err
	}
	for _, s := range []SASL{
		{SASLPlain, "plain-user", "plain-secret"},
		{SASLScramSHA256, "scram256-user", "scram256-secret"},
		{SASLScramSHA512, "scram512-user", "scram512-secret"},
	} {
		if _, err := connect(Security{TLS: clientTLS, SASL: s}); err != nil {
			t.Errorf("%s: %v", s.Mechanism, err)
		}
		s.Password = "wrong-" + s.Password
		took, err := connect(Security{TLS: clientTLS, SASL: s})
		if err == nil || !strings.Contains(err.Error(), "check the credentials") || !strings.Contains(err.Error(), s.User) {
			t.Errorf("%s, wrong password: %v; want an error naming the user, saying to check the credentials", s.Mechanism, err)
		} else if strings.Contains(err.Error(), s.Password) {
			t.Errorf("%s: the error shows the password: %v", s.Mechanism, err)
		}
		t.Logf("%s, wrong password: failed after %v: %v", s.Mechanism, took.Round(time.Millisecond), err)
		if took > 2*time.Second {
			t.Errorf("%s, wrong password: failed after %v; want at once, not at the dial timeout", s.Mechanism, took)
		}
	}
	other, err := kafkatest.WriteCerts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	otherTLS, err := TLSFiles{CA: other.CA}.Load()
	if err != nil {
		t.Fatal(err)
	}
	_, err = connect(Security{TLS: otherTLS, SASL: SASL{SASLScramSHA512, "scram512-user", "scram512-secret"}})
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("broker certificate from another authority: %v; want ErrUnreachable about the certificate", err)
	}
}

// What a failed connection may mean is said only where it fits.
func TestSecurityHint(t *testing.T) {
	badCert := errors.New("kafka: client has run out of available brokers to talk to: remote error: tls: bad certificate")
	withCert := &tls.Config{Certificates: []tls.Certificate{{}}}
	scram := SASL{SASLScramSHA512, "alice", "pw"}
	for _, c := range []struct {
		sec  Security
		err  error
		want []string // "" for no hint
	}{
		{Security{TLS: &tls.Config{}}, badCert, []string{"require a client certificate"}},
		{Security{TLS: withCert}, badCert, []string{""}},
		{Security{SASL: scram}, io.EOF, []string{`refused SASL SCRAM-SHA-512 as user "alice", check the credentials`}},
		{Security{TLS: &tls.Config{}, SASL: scram}, fmt.Errorf("read: %w", syscall.ECONNRESET), []string{"check the credentials", "require a client certificate"}},
		{Security{SASL: scram}, errors.New("dial tcp: connection refused"), []string{""}},
		{Security{}, io.EOF, []string{""}},
	} {
		got := c.sec.hint(c.err)
		for _, w := range c.want {
			if (w == "" && got != "") || !strings.Contains(got, w) {
				t.Errorf("hint(%+v, %v) = %q, want %q", c.sec.SASL, c.err, got, w)
			}
		}
		if strings.Contains(got, "pw") {
			t.Errorf("hint shows the password: %q", got)
		}
	}
}
