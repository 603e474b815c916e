package systemtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/internal/kafkatest"
	"github.com/ivrsched/ivrsched/topology"
)

// saslSSL are the options of a broker with a SASL_SSL listener: TLS with
// the test's server certificate (a PEM keystore), client certificates
// required (mutual TLS), and SASL users alice (SCRAM-SHA-512), bob
// (SCRAM-SHA-256) and carol (PLAIN).
func saslSSL(certs kafkatest.Certs) []kafkatest.Option {
	const l = "listener.name.sasl_ssl."
	const scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
	props := map[string]string{
		l + "sasl.enabled.mechanisms":        "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN",
		l + "scram-sha-512.sasl.jaas.config": scram,
		l + "scram-sha-256.sasl.jaas.config": scram,
		l + "plain.sasl.jaas.config":         `org.apache.kafka.common.security.plain.PlainLoginModule required user_carol="carol-secret";`,
		l + "ssl.keystore.type":              "PEM",
		l + "ssl.keystore.location":          certs.ServerKeystore,
		l + "ssl.truststore.type":            "PEM",
		l + "ssl.truststore.location":        certs.CA,
		l + "ssl.client.auth":                "required",
	}
	opts := []kafkatest.Option{
		kafkatest.WithListener("SASL_SSL", "SASL_SSL"),
		kafkatest.WithFormatArgs("--add-scram", "SCRAM-SHA-512=[name=alice,password=alice-secret]",
			"--add-scram", "SCRAM-SHA-256=[name=bob,password=bob-secret]"),
	}
	for k, v := range props {
		opts = append(opts, kafkatest.WithProperty(k, v))
	}
	return opts
}

// The pipeline through a SASL_SSL listener of Apache Kafka (certificates
// made by the test, client certificates required, SCRAM-SHA-512): every
// follow-up placed once, never early, and /readyz says when the roles are
// ready. Each mechanism reads the calls back; a wrong password, a missing
// client certificate and an unknown authority fail within the timeout,
// saying why.
func TestSASLSSL(t *testing.T) {
	if testing.Short() {
		t.Skip("system test against Apache Kafka; skipped with -short")
	}
	dir := t.TempDir()
	certs, err := kafkatest.WriteCerts(dir)
	if err != nil {
		t.Fatal(err)
	}
	broker := kafkatest.StartForTest(t, saslSSL(certs)...)
	addr := broker.ListenerAddr("SASL_SSL")
	tlsArgs := []string{"--tls-ca", certs.CA, "--tls-cert", certs.ClientCert, "--tls-key", certs.ClientKey}
	creds := filepath.Join(dir, "alice.credentials")
	if err := os.WriteFile(creds, []byte("username=alice\npassword=alice-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	pfx, parts := prefix(t), 4
	prov := newProvider(t)
	web := freeAddr(t)
	ivr := start(t, "run", append([]string{"run", "--http", web}, roleArgs(t, addr, pfx, parts,
		append(tlsArgs, "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-credentials", creds, "--provider", "webhook", "--webhook-url", prov.url())...)...)...)
	began := time.Now()
	awaitReady(t, web, ivr, 90*time.Second)
	t.Logf("roles ready through SASL_SSL after %v", time.Since(began).Round(time.Millisecond))

	clientTLS, err := kafkaclient.TLSFiles{CA: certs.CA, Cert: certs.ClientCert, Key: certs.ClientKey}.Load()
	if err != nil {
		t.Fatal(err)
	}
	k := kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: []string{addr}, Partitions: parts, Replication: 1, FlushFrequency: 5 * time.Millisecond,
		Security: kafkaclient.Security{TLS: clientTLS, SASL: kafkaclient.SASL{Mechanism: kafkaclient.SASLScramSHA512, User: "alice", Password: "alice-secret"}}}
	want := scheduleOn(t, k, pfx, spread(300, 2, time.Now().Add(3*time.Second), 4*time.Second))
	r := prov.waitAll(t, want, time.Now().Add(90*time.Second), ivr)
	r.check(t)

	// Every mechanism, with the credentials from the environment.
	for _, c := range []struct{ mech, user, password string }{
		{"SCRAM-SHA-512", "alice", "alice-secret"},
		{"SCRAM-SHA-256", "bob", "bob-secret"},
		{"PLAIN", "carol", "carol-secret"},
	} {
		out, errOut, code, took := cli(t, []string{"IVRSCHED_SASL_USERNAME=" + c.user, "IVRSCHED_SASL_PASSWORD=" + c.password},
			append([]string{"calls", "--brokers", addr, "--topic-prefix", pfx, "--from-beginning", "--limit", "3", "--sasl-mechanism", c.mech}, tlsArgs...)...)
		lines := 0
		for sc := bufio.NewScanner(strings.NewReader(out)); sc.Scan(); lines++ {
			var call struct {
				CallID string `json:"call_id"`
			}
			if err := json.Unmarshal(sc.Bytes(), &call); err != nil || call.CallID == "" {
				t.Errorf("%s: line %q is not a call", c.mech, sc.Text())
			}
		}
		if code != 0 || lines != 3 {
			t.Errorf("%s as %s: exit %d, %d calls, stderr %q; want 3 calls", c.mech, c.user, code, lines, errOut)
		}
		t.Logf("%s as %s: read %d calls in %v", c.mech, c.user, lines, took.Round(time.Millisecond))
	}

	// What fails, fails within --timeout and says why.
	const timeout = 30 * time.Second
	onboard := []string{"onboard", "--user", "u1", "--phone", "+14155550100", "--brokers", addr, "--topic-prefix", pfx, "--timeout", timeout.String()}
	other, err := kafkatest.WriteCerts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"wrong password", []string{"IVRSCHED_SASL_USERNAME=alice", "IVRSCHED_SASL_PASSWORD=not-alice-secret"},
			append(append(onboard, tlsArgs...), "--sasl-mechanism", "SCRAM-SHA-512"),
			[]string{"SASL authentication failed", `SCRAM-SHA-512 as user "alice"`, "check the credentials"}},
		{"wrong password, scheduler role", []string{"IVRSCHED_SASL_USERNAME=alice", "IVRSCHED_SASL_PASSWORD=not-alice-secret"},
			append(append([]string{"scheduler", "--data-dir", t.TempDir(), "--http", "", "--brokers", addr, "--topic-prefix", pfx, "--timeout", timeout.String()}, tlsArgs...), "--sasl-mechanism", "SCRAM-SHA-512"),
			[]string{"SASL authentication failed", "check the credentials"}},
		{"unknown user", []string{"IVRSCHED_SASL_USERNAME=mallory", "IVRSCHED_SASL_PASSWORD=alice-secret"},
			append(append(onboard, tlsArgs...), "--sasl-mechanism", "SCRAM-SHA-256"),
			[]string{"SASL authentication failed", "check the credentials"}},
		{"no client certificate", []string{"IVRSCHED_SASL_USERNAME=alice", "IVRSCHED_SASL_PASSWORD=alice-secret"},
			append(onboard, "--tls-ca", certs.CA, "--sasl-mechanism", "SCRAM-SHA-512"),
			[]string{"brokers not reachable", addr, "require a client certificate"}},
		{"broker certificate from another authority", []string{"IVRSCHED_SASL_USERNAME=alice", "IVRSCHED_SASL_PASSWORD=alice-secret"},
			append(onboard, "--tls-ca", other.CA, "--tls-cert", certs.ClientCert, "--tls-key", certs.ClientKey, "--sasl-mechanism", "SCRAM-SHA-512"),
			[]string{"brokers not reachable", "certificate signed by unknown authority"}},
	} {
		_, errOut, code, took := cli(t, c.env, c.args...)
		t.Logf("%s: exit %d after %v: %s", c.name, code, took.Round(time.Millisecond), strings.TrimSpace(errOut))
		if code != 1 || took > timeout {
			t.Errorf("%s: exit %d after %v; want exit 1 within --timeout %v", c.name, code, took, timeout)
		}
		for _, w := range c.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%s: stderr %q; want it to say %q", c.name, errOut, w)
			}
		}
		if strings.Contains(errOut, "secret") {
			t.Errorf("%s: stderr shows a password: %q", c.name, errOut)
		}
	}
	if err := ivr.stop(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
}

// cli runs the ivrsched binary to its end with env added to the
// environment.
func cli(t *testing.T, env []string, args ...string) (stdout, stderr string, code int, took time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	took = time.Since(start)
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), errOut.String(), ee.ExitCode(), took
	} else if err != nil {
		t.Fatalf("ivrsched %v: %v", args, err)
	}
	return out.String(), errOut.String(), 0, took
}

// awaitReady polls /readyz on web, as Kubernetes does, until it answers
// 200; /healthz must answer 200 all along.
func awaitReady(t *testing.T, web string, p *proc, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + web + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(body))
	}
	last := ""
	for {
		if err := p.exited(); err != nil {
			t.Fatal(err)
		}
		code, body := get("/readyz")
		if body != last {
			t.Logf("/readyz: %d %s", code, body)
			last = body
		}
		if code == http.StatusOK {
			if code, body := get("/healthz"); code != http.StatusOK {
				t.Fatalf("/healthz: %d %s, want 200", code, body)
			}
			return
		}
		if code != 0 {
			if hc, body := get("/healthz"); hc != http.StatusOK {
				t.Fatalf("/healthz while not ready: %d %s, want 200", hc, body)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not 200 after %v: %d %s", within, code, body)
		}
		time.Sleep(100 * time.Millisecond) // a probe's period: nothing to await across processes
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return fmt.Sprint(ln.Addr())
}
