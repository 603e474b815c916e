package systemtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/topology"
)

// The Java client (clients/java, with its Spring Boot example) and the
// Node.js client (clients/node) run their own tests here, against this
// Apache Kafka and a live ivrsched: each onboards users and sees the calls
// fire, cancels before and after the fire, reschedules and forgets, and
// reads what the scheduler and the dialer publish. Then the contract check:
// Go, Java and Node.js each send the same logical commands (written with
// their own API) to a topic of their own; the records must decode to equal
// messages and land on the same partition, murmur2's.
//
// The children get KAFKA_BROKERS, IVRSCHED_TOPIC_PREFIX,
// IVRSCHED_CONTRACT_PREFIX and CI=true, so a test of theirs that would skip
// fails instead.
func TestClients(t *testing.T) {
	brokers := needKafka(t)
	javaDir := needMaven(t)
	nodeDir := needNode(t)
	pfx, parts := prefix(t), 6
	topics := topology.NewTopics(pfx)
	ivr := start(t, "run", append([]string{"run", "--http", ""}, roleArgs(t, brokers, pfx, parts)...)...)
	for _, topic := range []goka.Stream{topics.Onboarding, topics.Calls, topics.Results, topics.Events} {
		waitTopic(t, brokers, string(topic), parts, ivr)
	}

	// One onboarding topic per client for the contract check; no scheduler reads them.
	contract := map[string]string{} // client → prefix of its topic
	var specs []topology.TopicSpec
	for _, client := range []string{"go", "java", "node"} {
		contract[client] = pfx + "contract-" + client + "-"
		specs = append(specs, topology.TopicSpec{Name: contract[client] + "onboarding", Retain: time.Hour})
	}
	k := kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: strings.Split(brokers, ","), Partitions: parts, Replication: 1, FlushFrequency: 5 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := topology.EnsureTopics(ctx, k, specs); err != nil {
		t.Fatal(err)
	}

	// Clipped: each client appends its own variable to a copy.
	env := slices.Clip(append(os.Environ(), "KAFKA_BROKERS="+brokers, "IVRSCHED_TOPIC_PREFIX="+pfx, "CI=true"))
	// Java and Node.js at once: both spend most of their time waiting for
	// due times and Kafka, and their users and groups differ.
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		runJavaTests(t, javaDir, append(env, "IVRSCHED_CONTRACT_PREFIX="+contract["java"]))
	}()
	go func() {
		defer wg.Done()
		runNodeTests(t, nodeDir, append(env, "IVRSCHED_CONTRACT_PREFIX="+contract["node"]))
	}()
	wg.Wait()
	if err := ivr.exited(); err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		t.FailNow()
	}

	produceContract(t, k, contract["go"]+"onboarding", contractCommands())
	checkContract(t, brokers, parts, contract)
	if err := ivr.stop(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
}

// contractCommands are the contract check's commands as Go writes them; the
// Java (ContractTest.java) and Node.js (contract.test.js) tests write the
// same with their clients' APIs.
func contractCommands() []*pb.Command {
	req := timestamppb.New(time.Date(2026, 3, 1, 12, 0, 0, 123e6, time.UTC))
	cmd := func(user string, c func(*pb.Command)) *pb.Command {
		m := &pb.Command{UserId: user, RequestedAt: req}
		c(m)
		return m
	}
	return []*pb.Command{
		cmd("contract-alice", func(m *pb.Command) {
			m.Command = &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: "+14155550123", TimeZone: "Europe/Berlin", FollowUps: []*pb.FollowUp{
				{TaskId: "welcome", When: &pb.FollowUp_Delay{Delay: durationpb.New(90 * time.Second)},
					Action: &pb.Action{IvrScript: "welcome-ivr", CampaignId: "spring-2026"}},
				{TaskId: "reminder", When: &pb.FollowUp_DueAt{DueAt: timestamppb.New(time.Date(2026, 3, 8, 9, 30, 0, 1, time.UTC))},
					Payload: []byte(`{"lang":"de"}`)},
			}}}
		}),
		cmd("contract-frank", func(m *pb.Command) { m.Command = &pb.Command_Onboard{Onboard: &pb.Onboard{}} }),
		cmd("contract-bob", func(m *pb.Command) { m.Command = &pb.Command_Cancel{Cancel: &pb.Cancel{TaskId: "welcome"}} }),
		cmd("contract-carol", func(m *pb.Command) { m.Command = &pb.Command_Cancel{Cancel: &pb.Cancel{}} }),
		cmd("contract-dave", func(m *pb.Command) {
			m.Command = &pb.Command_Reschedule{Reschedule: &pb.Reschedule{TaskId: "welcome",
				When: &pb.Reschedule_DueAt{DueAt: timestamppb.New(time.Date(2026, 3, 2, 10, 0, 0, 5e8, time.UTC))}}}
		}),
		cmd("contract-erin", func(m *pb.Command) {
			m.Command = &pb.Command_Reschedule{Reschedule: &pb.Reschedule{TaskId: "welcome",
				When: &pb.Reschedule_Delay{Delay: durationpb.New(45 * time.Minute)}}}
		}),
		cmd("contract-zoë", func(m *pb.Command) { m.Command = &pb.Command_Forget{Forget: &pb.Forget{}} }),
	}
}

// produceContract sends the commands as ivrsched's Go code does: a Goka
// emitter with topology's murmur2 hasher.
func produceContract(t *testing.T, k kafkaclient.Kafka, topic string, cmds []*pb.Command) {
	t.Helper()
	em, err := goka.NewEmitter(k.Brokers, goka.Stream(topic), new(codec.Command), k.EmitterOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds {
		if err := em.EmitSync(c.GetUserId(), c); err != nil {
			t.Fatal(err)
		}
	}
	if err := em.Finish(); err != nil {
		t.Fatal(err)
	}
}

// contractRecord is one record of a contract topic.
type contractRecord struct {
	partition int32
	cmd       *pb.Command
}

// checkContract reads the three contract topics and compares them, user by user.
func checkContract(t *testing.T, brokers string, parts int, contract map[string]string) {
	t.Helper()
	want := contractCommands()
	got := map[string]map[string]contractRecord{} // client → user → record
	for client, p := range contract {
		got[client] = readCommands(t, brokers, p+"onboarding", len(want))
	}
	hit := map[int32]bool{}
	for _, w := range want {
		user := w.GetUserId()
		part := topology.Partition(user, int32(parts))
		hit[part] = true
		for _, client := range []string{"go", "java", "node"} {
			r, ok := got[client][user]
			switch {
			case !ok:
				t.Errorf("%s wrote no record for %s", client, user)
			case r.partition != part:
				t.Errorf("%s placed %s on partition %d; murmur2 (and ivrsched) place it on %d", client, user, r.partition, part)
			case !proto.Equal(r.cmd, w):
				t.Errorf("%s's command for %s differs from Go's:\n%s: %s\ngo:  %s", client, user, client,
					prototext.Format(r.cmd), prototext.Format(w))
			}
		}
	}
	if !t.Failed() {
		t.Logf("contract: %d commands (onboard, cancel one and all, reschedule to a time and by a delay, forget; a non-ASCII user id) decode equal from Go, Java and Node.js, each on murmur2's partition (%d of %d partitions used)",
			len(want), len(hit), parts)
	}
}

// readCommands reads want records of topic, decoded, by key. A key seen
// twice fails the test.
func readCommands(t *testing.T, brokers, topic string, want int) map[string]contractRecord {
	t.Helper()
	out := map[string]contractRecord{}
	for _, m := range consumeAll(t, brokers, topic, want, 30*time.Second) {
		c := &pb.Command{}
		if err := proto.Unmarshal(m.Value, c); err != nil {
			t.Fatalf("%s/%d@%d: not a Command: %v", topic, m.Partition, m.Offset, err)
		}
		if _, dup := out[string(m.Key)]; dup {
			t.Fatalf("%s: two records for %s", topic, m.Key)
		}
		if string(m.Key) != c.GetUserId() {
			t.Fatalf("%s/%d@%d: key %q, user id %q", topic, m.Partition, m.Offset, m.Key, c.GetUserId())
		}
		out[string(m.Key)] = contractRecord{partition: m.Partition, cmd: c}
	}
	return out
}

// unavailable skips the test, loudly, because a tool it needs is missing;
// in CI (CI=true) it fails the test instead.
func unavailable(t *testing.T, why string) {
	t.Helper()
	msg := "!!! " + why + " !!!"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: failing instead of skipping)")
	}
	t.Skip(msg)
}

// needMaven returns the directory of the Java client, or skips the test when
// Java 17+ or Maven is missing; in CI (CI=true) that fails the test instead.
func needMaven(t *testing.T) string {
	t.Helper()
	missing := func(what string) {
		t.Helper()
		unavailable(t, what+": the Java client's tests need Java 17+ and Maven on PATH (apt-get install openjdk-17-jdk-headless maven)")
	}
	if _, err := exec.LookPath("mvn"); err != nil {
		missing("mvn not found")
	}
	out, err := exec.Command("mvn", "--version").CombinedOutput()
	if err != nil {
		missing(fmt.Sprintf("mvn --version: %v", err))
	}
	// "Java version: 17.0.15, vendor: ...": the Java that Maven runs.
	m := regexp.MustCompile(`Java version: (\d+)`).FindSubmatch(out)
	if m == nil {
		missing(fmt.Sprintf("mvn --version names no Java version:\n%s", out))
	}
	if v, _ := strconv.Atoi(string(m[1])); v < 17 {
		missing(fmt.Sprintf("Maven runs Java %s", m[1]))
	}
	dir, err := filepath.Abs(filepath.Join("..", "clients", "java"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// runJavaTests builds the Java client and the Spring Boot example and runs
// their tests (mvn verify; Maven's downloads go to ~/.m2), failing t with
// Maven's output if they fail or if a test class did not run.
func runJavaTests(t *testing.T, dir string, env []string) {
	// clean: classes generated from an older .proto must not survive.
	out, took, ok := runChild(t, dir, env, 15*time.Minute, "mvn", "--batch-mode", "--no-transfer-progress", "-Dstyle.color=never", "clean", "verify")
	if !ok {
		return
	}
	// Each test class ran, none skipped (CI=true turns a skip into a failure).
	summary := regexp.MustCompile(`Tests run: (\d+), Failures: (\d+), Errors: (\d+), Skipped: (\d+), Time elapsed: ([\d.,]+ s) -+ in ([\w.]+)`)
	ran := map[string]string{}
	for _, m := range summary.FindAllSubmatch(out, -1) {
		if string(m[4]) != "0" {
			t.Errorf("%s: %s tests skipped", m[6], m[4])
		}
		name := string(m[6])[strings.LastIndex(string(m[6]), ".")+1:]
		ran[name] = fmt.Sprintf("%s tests in %s", m[1], m[5])
	}
	for _, class := range []string{"CommandsTest", "FollowUpsTest", "FollowUpsKafkaTest", "ContractTest", "ReadmeExampleTest", "OnboardingApplicationTest"} {
		if ran[class] == "" {
			t.Errorf("mvn verify ran no %s:\n%s", class, tail(out, 20000))
		}
	}
	t.Logf("Java: mvn clean verify took %v: %v; %s", took, ran, grepLines(out, "java: ", "spring: "))
}

// runNodeTests runs the Node.js client's tests (npm test: node --test),
// failing t with their output if they fail or if any was skipped.
func runNodeTests(t *testing.T, dir string, env []string) {
	out, took, ok := runChild(t, dir, env, 10*time.Minute, "npm", "test", "--silent")
	if !ok {
		return
	}
	count := func(what string) int {
		m := regexp.MustCompile(`(?m)^# ` + what + ` (\d+)$`).FindSubmatch(out)
		if m == nil {
			t.Errorf("npm test printed no %q count:\n%s", what, tail(out, 20000))
			return -1
		}
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	if pass, skipped := count("pass"), count("skipped"); pass < 15 || skipped != 0 {
		t.Errorf("npm test: %d passed (want at least 15), %d skipped:\n%s", pass, skipped, tail(out, 20000))
	}
	t.Logf("Node.js: npm test took %v, %d tests passed; %s", took, count("pass"), grepLines(out, "# node-"))
}

// runChild runs a command in dir with env and returns its output and how
// long it took; if it fails, t gets an error with the end of its output.
// Safe to call from several goroutines.
func runChild(t *testing.T, dir string, env []string, timeout time.Duration, name string, args ...string) (out []byte, took time.Duration, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	began := time.Now()
	out, err := cmd.CombinedOutput()
	took = time.Since(began).Round(100 * time.Millisecond)
	if err != nil {
		t.Errorf("%s %s in %s failed after %v: %v\n%s", name, strings.Join(args, " "), dir, took, err, tail(out, 20000))
		return out, took, false
	}
	return out, took, true
}

// grepLines returns the lines of out that start with one of the prefixes.
func grepLines(out []byte, prefixes ...string) string {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				lines = append(lines, line)
			}
		}
	}
	return strings.Join(lines, "; ")
}

// The clients' READMEs (clients/java/README.md, clients/node/README.md)
// show the Java, Spring and Node.js examples as the tests run them: every
// block between "README: <name> begin" and "README: <name> end" markers in
// these files must appear in its client's README as written (indentation
// aside).
func TestClientSnippetsInReadme(t *testing.T) {
	const java, node = "clients/java/README.md", "clients/node/README.md"
	spring := "clients/java/spring-example/"
	snippets := []struct{ name, file, readme string }{
		{"java", "clients/java/client/src/test/java/example/Onboard.java", java},
		{"spring pom", spring + "pom.xml", java},
		{"spring properties", spring + "src/main/resources/application.properties", java},
		{"spring controller", spring + "src/main/java/com/github/ivrsched/example/onboarding/UserController.java", java},
		{"spring listener", spring + "src/main/java/com/github/ivrsched/example/onboarding/FollowUpListener.java", java},
		{"spring handler", spring + "src/main/java/com/github/ivrsched/example/onboarding/FollowUpHandler.java", java},
		{"node", "clients/node/examples/onboard.js", node},
	}
	readmes := map[string][]byte{}
	for _, s := range snippets {
		readme, ok := readmes[s.readme]
		if !ok {
			var err error
			if readme, err = os.ReadFile(filepath.Join("..", s.readme)); err != nil {
				t.Fatal(err)
			}
			readmes[s.readme] = readme
		}
		src, err := os.ReadFile(filepath.Join("..", s.file))
		if err != nil {
			t.Fatal(err)
		}
		block := between(src, "README: "+s.name+" begin", "README: "+s.name+" end")
		if block == "" {
			t.Errorf("%s has no %q block", s.file, s.name)
			continue
		}
		if !bytes.Contains(readme, []byte(block)) {
			t.Errorf("%s does not show the %q snippet of %s as written there:\n%s", s.readme, s.name, s.file, block)
		}
	}
}

// between returns the lines strictly between the lines holding the begin and
// end markers, without their common indentation.
func between(src []byte, begin, end string) string {
	lines := strings.Split(string(src), "\n")
	from, to := -1, -1
	for i, l := range lines {
		switch {
		case strings.Contains(l, begin):
			from = i + 1
		case strings.Contains(l, end) && from >= 0:
			to = i
		}
	}
	if from < 0 || to < from {
		return ""
	}
	block := lines[from:to]
	indent := -1
	for _, l := range block {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if n := len(l) - len(strings.TrimLeft(l, " \t")); indent < 0 || n < indent {
			indent = n
		}
	}
	for i, l := range block {
		if len(l) >= indent && indent > 0 {
			block[i] = l[indent:]
		}
	}
	return strings.Join(block, "\n") + "\n"
}
