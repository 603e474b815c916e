package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/internal/kafkatest"
)

// minimal arguments of each command that talks to Kafka, up to its Kafka
// settings.
var kafkaCommands = [][]string{
	{"run", "--brokers", "127.0.0.1:1"},
	{"scheduler"},
	{"dialer"},
	{"onboard", "--user", "u", "--phone", "+14155550123"},
	{"cancel", "--user", "u"},
	{"reschedule", "--user", "u", "--task", "t", "--delay", "1h"},
	{"forget", "--user", "u"},
	{"calls"},
}

// Every command that talks to Kafka has the TLS and SASL flags, and a bad
// one is one line naming the flag, exit 2, that never shows a secret.
func TestSecurityFlagErrors(t *testing.T) {
	dir := t.TempDir()
	certs, err := kafkatest.WriteCerts(dir)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noPassword := write("no-password", "username=alice\n")
	badLine := write("bad-line", "user: alice\npassword=s3cr3t-in-file\n")
	t.Setenv(envSASLUsername, "")
	t.Setenv(envSASLPassword, "")
	cases := []struct {
		flags []string
		env   map[string]string
		want  string
	}{
		{[]string{"--sasl-mechanism", "GSSAPI"}, nil, `--sasl-mechanism: "GSSAPI"; want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512`},
		{[]string{"--sasl-mechanism", "SCRAM-SHA-512"}, nil, "--sasl-mechanism: SCRAM-SHA-512 needs a user name and a password: $IVRSCHED_SASL_USERNAME and $IVRSCHED_SASL_PASSWORD not set"},
		{[]string{"--sasl-mechanism", "PLAIN"}, map[string]string{envSASLUsername: "alice"}, "$IVRSCHED_SASL_PASSWORD not set"},
		{[]string{"--sasl-credentials", noPassword}, nil, "--sasl-credentials: given, but no --sasl-mechanism"},
		{[]string{"--sasl-mechanism", "scram-sha-256", "--sasl-credentials", noPassword}, nil, "--sasl-credentials: " + noPassword + " has no password=SECRET line"},
		{[]string{"--sasl-mechanism", "PLAIN", "--sasl-credentials", badLine}, nil, "--sasl-credentials: " + badLine + " line 1: want username=NAME or password=SECRET"},
		{[]string{"--sasl-mechanism", "PLAIN", "--sasl-credentials", filepath.Join(dir, "missing")}, nil, "--sasl-credentials: open"},
		{[]string{"--sasl-mechanism", "PLAIN"}, map[string]string{envSASLUsername: "alice", envSASLPassword: "s3cr3t"},
			"--sasl-mechanism: PLAIN without TLS sends the password in clear; add --tls (with --tls-ca for a private authority), use SCRAM-SHA-512, or accept the risk with --insecure-sasl-plain"},
		{[]string{"--insecure-sasl-plain", "--sasl-mechanism", "SCRAM-SHA-512"}, map[string]string{envSASLUsername: "alice", envSASLPassword: "s3cr3t"},
			"--insecure-sasl-plain: given, but --sasl-mechanism is not PLAIN"},
		{[]string{"--tls-ca", filepath.Join(dir, "missing.pem")}, nil, "--tls-ca: TLS ca file"},
		{[]string{"--tls-ca", badLine}, nil, "--tls-ca: TLS ca file " + badLine + ": no PEM certificate in it"},
		{[]string{"--tls-cert", certs.ClientCert}, nil, "--tls-key: "},
		{[]string{"--tls-key", certs.ClientKey}, nil, "--tls-cert: "},
		{[]string{"--tls-cert", certs.ClientCert, "--tls-key", certs.ServerKey}, nil, "--tls-key: TLS key file " + certs.ServerKey + ": does not go with certificate"},
	}
	for _, cmd := range kafkaCommands {
		for _, c := range cases {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			args := append(append(append([]string{}, cmd...), "--data-dir", t.TempDir()), c.flags...)
			if cmd[0] != "run" && cmd[0] != "scheduler" && cmd[0] != "dialer" {
				args = append(append([]string{}, cmd...), c.flags...)
			}
			var errb bytes.Buffer
			code := realMain(context.Background(), args, &bytes.Buffer{}, &errb)
			msg := errb.String()
			if code != 2 || !strings.Contains(msg, c.want) || strings.Count(msg, "\n") != 1 {
				t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line containing %q", args, code, msg, c.want)
			}
			if strings.Contains(msg, "s3cr3t") {
				t.Errorf("%v: stderr shows a secret: %q", args, msg)
			}
			for k := range c.env {
				t.Setenv(k, "")
			}
		}
	}
	var errb bytes.Buffer
	if code := realMain(context.Background(), []string{"run", "--tls", "--data-dir", t.TempDir()}, &bytes.Buffer{}, &errb); code != 2 || !strings.Contains(errb.String(), "--brokers: required with TLS or SASL flags") {
		t.Errorf("run --tls without --brokers: exit %d, %q", code, errb.String())
	}
}

// The credentials come from the environment or from --sasl-credentials,
// and the TLS files are loaded, into kafkaclient.Kafka.Security.
func TestSecurityFlagsReachKafkaConfig(t *testing.T) {
	dir := t.TempDir()
	certs, err := kafkatest.WriteCerts(dir)
	if err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(dir, "creds")
	if err := os.WriteFile(creds, []byte("# ivrsched\nusername=bob\npassword= from file \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if k := parseKafkaFlags(t); k.Security.TLS != nil || k.Security.SASL != (kafkaclient.SASL{}) {
		t.Fatalf("no flags: %+v", k.Security)
	}
	t.Setenv(envSASLUsername, "alice")
	t.Setenv(envSASLPassword, "from env")
	k := parseKafkaFlags(t, "--tls-ca", certs.CA, "--tls-cert", certs.ClientCert, "--tls-key", certs.ClientKey, "--sasl-mechanism", "scram-sha-512")
	if k.Security.TLS == nil || k.Security.TLS.RootCAs == nil || len(k.Security.TLS.Certificates) != 1 {
		t.Fatalf("TLS files not loaded: %+v", k.Security.TLS)
	}
	if want := (kafkaclient.SASL{Mechanism: "SCRAM-SHA-512", User: "alice", Password: "from env"}); k.Security.SASL != want {
		t.Fatalf("SASL from the environment: %+v, want %+v", k.Security.SASL, want)
	}
	if k := parseKafkaFlags(t, "--sasl-mechanism", "PLAIN", "--insecure-sasl-plain"); k.Security.TLS != nil || !k.Security.AllowPlainWithoutTLS || k.Security.SASL.Mechanism != "PLAIN" {
		t.Fatalf("--insecure-sasl-plain: %+v, want PLAIN without TLS, the risk accepted", k.Security)
	}
	k = parseKafkaFlags(t, "--tls", "--sasl-mechanism", "PLAIN", "--sasl-credentials", creds)
	if k.Security.TLS == nil || k.Security.TLS.RootCAs != nil {
		t.Fatalf("--tls alone: %+v, want TLS with the system's roots", k.Security.TLS)
	}
	if want := (kafkaclient.SASL{Mechanism: "PLAIN", User: "bob", Password: " from file "}); k.Security.SASL != want {
		t.Fatalf("SASL from the file: %+v, want %+v (the file wins over the environment)", k.Security.SASL, want)
	}
}

// A wrong password ends a command at once with a message that says to
// check the credentials, not after --timeout (kfake here; the system test
// TestSASLSSL checks Apache Kafka's answer).
func TestWrongPasswordFailsFast(t *testing.T) {
	certs, err := kafkatest.WriteCerts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := certs.ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(serverTLS),
		kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "alice", "right"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t.Setenv(envSASLUsername, "alice")
	t.Setenv(envSASLPassword, "wrong")
	args := []string{"onboard", "--user", "u", "--phone", "+14155550123", "--brokers", c.ListenAddrs()[0], "--timeout", "20s",
		"--tls-ca", certs.CA, "--sasl-mechanism", "SCRAM-SHA-512"}
	var errb bytes.Buffer
	start := time.Now()
	code := realMain(context.Background(), args, &bytes.Buffer{}, &errb)
	took := time.Since(start)
	if code != 1 || !strings.Contains(errb.String(), "check the credentials") || strings.Contains(errb.String(), "wrong") {
		t.Fatalf("exit %d, stderr %q; want exit 1 saying to check the credentials, without the password", code, errb.String())
	}
	if took > 5*time.Second {
		t.Fatalf("failed after %v; want at once, well within --timeout 20s", took)
	}
	t.Logf("wrong password: exit %d after %v: %s", code, took.Round(time.Millisecond), strings.TrimSpace(errb.String()))
	t.Setenv(envSASLPassword, "right")
	errb.Reset()
	// Past the authentication, the produce fails only because kfake has
	// no onboarding topic.
	if code := realMain(context.Background(), args, &bytes.Buffer{}, &errb); code != 0 && !strings.Contains(errb.String(), "does not exist") {
		t.Fatalf("right password: exit %d, %q; want past the authentication", code, errb.String())
	}
}

// --fetch-wait is every consumer's fetch wait (500 ms by default);
// --background-fetch-wait is still accepted, and changes nothing.
func TestFetchWaitFlagsReachKafkaConfig(t *testing.T) {
	for _, c := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 500 * time.Millisecond},
		{[]string{"--fetch-wait", "5ms"}, 5 * time.Millisecond},
		{[]string{"--fetch-wait", "0"}, 500 * time.Millisecond},
		{[]string{"--fetch-wait", "1s", "--background-fetch-wait", "10ms"}, time.Second},
		{[]string{"--background-fetch-wait", "0"}, 500 * time.Millisecond},
	} {
		cfg := parseKafkaFlags(t, c.args...)
		if got := cfg.Sarama().Consumer.MaxWaitTime; got != c.want {
			t.Errorf("%v: fetch wait %v, want %v", c.args, got, c.want)
		}
	}
}

// parseKafkaFlags is the Kafka config the flags every Kafka command has
// give for args; it fails t if they do not parse or the config is invalid.
func parseKafkaFlags(t *testing.T, args ...string) kafkaclient.Kafka {
	t.Helper()
	var k kafkaFlags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	k.register(fs, defaultBrokers)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	cfg, err := k.kafka("test")
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return cfg
}

// --insecure-sasl-plain's help says where the accepted risk shows: a warning
// at start and in /readyz's warnings.
func TestInsecurePlainHelpSaysItIsWarned(t *testing.T) {
	var s securityFlags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	s.register(fs)
	usage := fs.Lookup("insecure-sasl-plain").Usage
	for _, want := range []string{"warned at start", "/readyz"} {
		if !strings.Contains(usage, want) {
			t.Errorf("help %q does not say %q", usage, want)
		}
	}
}
