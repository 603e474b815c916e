package systemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/topology"
)

// Records produced by a non-Go client, kafkajs with its default (Java
// compatible, murmur2) partitioner, through the project's Node.js client
// example in clients/node: each lands on the partition where the scheduler
// keeps that user (the scheduler had to forward none of them), so it lands in
// the right user state. A second command for one user carries no phone: the
// scheduler only accepts it in the state the first command created, and the
// call it schedules carries that phone. The calls are read back with the
// Node.js consumer.
func TestCrossClientKafkaJS(t *testing.T) {
	brokers := needKafka(t)
	dir := needNode(t)
	pfx, parts := prefix(t), 6
	topics := topology.NewTopics(pfx)
	prov := newProvider(t)
	ivr := start(t, "run", append([]string{"run", "--http", ""}, roleArgs(t, brokers, pfx, parts, "--provider", "webhook", "--webhook-url", prov.url())...)...)
	// The test broker does not auto-create topics and the Node.js producer
	// would not ask it to: ivrsched creates them, with --partitions.
	waitTopic(t, brokers, string(topics.Onboarding), parts, ivr)

	users, elsewhereFNV, elsewhereCRC := crossUsers(20, int32(parts))
	if elsewhereFNV < 3 || elsewhereCRC < 3 {
		t.Fatalf("want users that FNV-1a and CRC32 place elsewhere; got %d and %d of %d", elsewhereFNV, elsewhereCRC, len(users))
	}
	phone := map[string]string{}
	zone := map[string]string{}
	zones := []string{"America/New_York", "Europe/Berlin", "Asia/Tokyo", "Australia/Sydney", "America/Sao_Paulo"}
	want := map[followUp]time.Time{}
	hit := map[int32]int{}
	// Due times go to node as RFC 3339 with nanoseconds and a +02:00 offset, so
	// the test knows each due time exactly and checks the encoding of both.
	east := time.FixedZone("", 2*3600)
	produce := func(user, task string, due time.Time, extra ...string) {
		t.Helper()
		args := append([]string{"produce.js", "--brokers", brokers, "--topic", string(topics.Onboarding),
			"--user", user, "--task", task, "--at", due.In(east).Format(time.RFC3339Nano)}, extra...)
		var got struct {
			Topic     string `json:"topic"`
			Partition int32  `json:"partition"`
			Offset    string `json:"offset"`
			User      string `json:"user"`
		}
		out := runNode(t, dir, args...)
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("produce.js printed %q, not one JSON object: %v", out, err)
		}
		if wantP := topology.Partition(user, int32(parts)); got.Partition != wantP || got.User != user || got.Topic != string(topics.Onboarding) {
			t.Fatalf("kafkajs placed user %q on %s/%d, ivrsched keeps it on partition %d", user, got.Topic, got.Partition, wantP)
		}
		hit[got.Partition]++
		want[followUp{user, task}] = due
	}
	begin := time.Now()
	for i, u := range users {
		phone[u], zone[u] = fmt.Sprintf("+1415555%04d", 100+i), zones[i%len(zones)]
		produce(u, "welcome", time.Now().Add(2*time.Second).Round(0), "--phone", phone[u], "--tz", zone[u])
	}
	// A second command for one user, onboarding a second task: no phone, no
	// zone. Onboarding without a phone is rejected unless the user's state
	// already has one.
	again := users[0]
	produce(again, "second", time.Now().Add(2500*time.Millisecond).Round(0))
	t.Logf("kafkajs produced %d records in %v, on %d of %d partitions %v, each on topology.Partition(user); of the %d users, %d would be elsewhere under Goka's default FNV-1a, %d under librdkafka's CRC32",
		len(want), time.Since(begin).Round(time.Millisecond), len(hit), parts, hit, len(users), elsewhereFNV, elsewhereCRC)
	if len(hit) != parts {
		t.Fatalf("records hit %d of %d partitions", len(hit), parts)
	}

	r := prov.waitAll(t, want, time.Now().Add(90*time.Second), ivr)
	r.check(t)
	if r.rawRepeats != 0 {
		t.Fatalf("%d repeated provider requests without any crash", r.rawRepeats)
	}
	// The scheduler forwards a record that arrives on another partition than
	// its key's; none was: the onboarding topic holds exactly what kafkajs
	// wrote, partition by partition.
	if got := partitionCounts(t, brokers, string(topics.Onboarding), parts); !maps.Equal(got, hit) {
		t.Fatalf("records on %s per partition: %v; kafkajs wrote %v (forwarded by the scheduler?)", topics.Onboarding, got, hit)
	}
	// The user state: every call carries the phone and zone its user was
	// onboarded with; both calls of the user with two commands come from one state.
	callID := map[followUp]string{}
	prov.mu.Lock()
	for _, q := range prov.reqs {
		c := q.call
		if c.GetPhone() != phone[c.GetUserId()] || c.GetTimeZone() != zone[c.GetUserId()] {
			t.Errorf("call %s for %s/%s: phone %q zone %q, want %q %q", c.GetCallId(), c.GetUserId(), c.GetTaskId(),
				c.GetPhone(), c.GetTimeZone(), phone[c.GetUserId()], zone[c.GetUserId()])
		}
		callID[followUp{c.GetUserId(), c.GetTaskId()}] = c.GetCallId()
	}
	prov.mu.Unlock()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("user %s: tasks welcome and second both called at %s (%s), the second onboarded without phone or zone",
		again, phone[again], zone[again])

	// Read the calls back with kafkajs.
	out := runNode(t, dir, "consume-calls.js", "--brokers", brokers, "--topic", string(topics.Calls),
		"--from-beginning", "--limit", strconv.Itoa(len(want)))
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(want) {
		t.Fatalf("consume-calls.js printed %d lines, want %d:\n%s", len(lines), len(want), out)
	}
	seen := map[followUp]bool{}
	for _, line := range lines {
		var c struct {
			CallID   string `json:"call_id"`
			UserID   string `json:"user_id"`
			TaskID   string `json:"task_id"`
			Phone    string `json:"phone"`
			TimeZone string `json:"time_zone"`
			DueAt    string `json:"due_at"`
			FiredAt  string `json:"fired_at"`
			Attempt  int    `json:"attempt"`
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("consume-calls.js line %q: %v", line, err)
		}
		f := followUp{c.UserID, c.TaskID}
		due, ok := want[f]
		if !ok || seen[f] {
			t.Fatalf("consume-calls.js printed an unexpected or repeated call: %s", line)
		}
		seen[f] = true
		gotDue, err := time.Parse(time.RFC3339Nano, c.DueAt)
		if err != nil || !gotDue.Equal(due) || c.CallID != callID[f] || c.Phone != phone[c.UserID] || c.TimeZone != zone[c.UserID] || c.Attempt != 1 {
			t.Fatalf("consume-calls.js printed %s; want due_at %s, call_id %s, phone %s, time_zone %s, attempt 1",
				line, due.UTC().Format(time.RFC3339Nano), callID[f], phone[c.UserID], zone[c.UserID])
		}
		if fired, err := time.Parse(time.RFC3339Nano, c.FiredAt); err != nil || fired.Before(due) {
			t.Fatalf("consume-calls.js printed fired_at %q for due %v", c.FiredAt, due)
		}
	}
	t.Logf("consume-calls.js printed %d calls, each matching the provider's call id, due time, phone and zone", len(lines))
	if err := ivr.stop(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
}

// crossUsers picks n user ids that Goka's default hasher (FNV-1a through
// Sarama's hash partitioner) and librdkafka's default (CRC32, unsigned) would
// both place on another partition than murmur2 does, covering every
// partition. It returns how many of them each other hasher misplaces.
func crossUsers(n int, parts int32) (users []string, elsewhereFNV, elsewhereCRC int) {
	fnvPartition := func(key string) int32 {
		h := fnv.New32a()
		h.Write([]byte(key))
		p := int32(h.Sum32()) % parts
		if p < 0 {
			p = -p
		}
		return p
	}
	crcPartition := func(key string) int32 { return int32(crc32.ChecksumIEEE([]byte(key)) % uint32(parts)) }
	covered := map[int32]bool{}
	var rest []string
	for i := 0; len(users) < n && i < 100000; i++ {
		u := fmt.Sprintf("node-user-%03d", i)
		m := topology.Partition(u, parts)
		if fnvPartition(u) == m || crcPartition(u) == m {
			continue
		}
		// First one user per partition, then the others in order.
		if !covered[m] && len(covered) < int(parts) {
			covered[m] = true
			users = append(users, u)
		} else {
			rest = append(rest, u)
		}
		if len(covered) == int(parts) && len(users)+len(rest) >= n {
			users = append(users, rest[:n-len(users)]...)
		}
	}
	for _, u := range users {
		m := topology.Partition(u, parts)
		if fnvPartition(u) != m {
			elsewhereFNV++
		}
		if crcPartition(u) != m {
			elsewhereCRC++
		}
	}
	return users, elsewhereFNV, elsewhereCRC
}

// needNode returns the directory of the Node.js client with its dependencies
// installed (npm ci from the committed lockfile) and its definitions
// generated, or skips the test when Node.js or npm is missing; in CI
// (CI=true) that fails the test instead.
func needNode(t *testing.T) string {
	t.Helper()
	missing := func(what string) {
		t.Helper()
		unavailable(t, what+": the Node.js client's tests need Node.js >= 20 and npm on PATH (apt-get install nodejs npm)")
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing(tool + " not found")
		}
	}
	v, err := exec.Command("node", "--version").Output()
	if err != nil {
		missing(fmt.Sprintf("node --version: %v", err))
	}
	major := 0
	if m := regexp.MustCompile(`^v(\d+)\.`).FindSubmatch(bytes.TrimSpace(v)); m != nil {
		major, _ = strconv.Atoi(string(m[1]))
	}
	if major < 20 {
		missing(fmt.Sprintf("node %s is too old", bytes.TrimSpace(v)))
	}
	dir, err := filepath.Abs(filepath.Join("..", "clients", "node"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	npm := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, "npm", args...)
		cmd.Dir = dir
		began := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("npm %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
		}
		t.Logf("npm %s in %s took %v", strings.Join(args, " "), dir, time.Since(began).Round(time.Millisecond))
	}
	// npm ci when node_modules is missing or older than the lockfile; then
	// generate the client's definitions from codec/ivrsched.proto, as the
	// .proto may have changed.
	installed, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json"))
	lock, lerr := os.Stat(filepath.Join(dir, "package-lock.json"))
	if lerr != nil {
		t.Fatal(lerr)
	}
	if err != nil || installed.ModTime().Before(lock.ModTime()) {
		npm("ci", "--no-audit", "--no-fund")
	}
	npm("run", "--silent", "generate")
	return dir
}

// runNode runs a script of the Node.js client and returns its stdout; a
// failure fails the test with its stderr.
func runNode(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.Bytes(), stderr.Bytes())
	}
	if stderr.Len() > 0 {
		t.Logf("node %s wrote to stderr: %s", args[0], stderr.Bytes())
	}
	return stdout.Bytes()
}

// partitionCounts returns how many records each partition of topic holds
// (partitions without any left out).
func partitionCounts(t *testing.T, brokers, topic string, parts int) map[int32]int {
	t.Helper()
	k := kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: strings.Split(brokers, ",")}
	client, err := sarama.NewClient(k.Brokers, k.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	counts := map[int32]int{}
	for p := int32(0); p < int32(parts); p++ {
		oldest, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		newest, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		if n := int(newest - oldest); n > 0 {
			counts[p] = n
		}
	}
	return counts
}

// waitTopic waits until topic exists with parts partitions.
func waitTopic(t *testing.T, brokers, topic string, parts int, ivr *proc) {
	t.Helper()
	k := kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: strings.Split(brokers, ",")}
	admin, err := sarama.NewClusterAdmin(k.Brokers, k.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	deadline := time.Now().Add(60 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		all, err := admin.ListTopics()
		if err == nil && int(all[topic].NumPartitions) == parts {
			return
		}
		if err := ivr.exited(); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic %s with %d partitions not there after 60s (list topics: %v)", topic, parts, err)
		}
		<-tick.C
	}
}
