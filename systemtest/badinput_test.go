package systemtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/deadletter"
	"github.com/ivrsched/ivrsched/internal/kafkatest"
	"github.com/ivrsched/ivrsched/topology"
)

// rawRecord is a record produced by hand, to an explicit partition.
type rawRecord struct {
	key       string
	value     []byte
	partition int32
	reason    deadletter.Reason // expected dead-letter reason; "" for a valid record
	timestamp time.Time         // the record timestamp the producer writes; zero: now
}

// partitioners a producer might have used, by name.
var partitioners = map[string]func(key string, n int32) int32{
	"murmur2": topology.Partition, // Java client, kafkajs
	"crc32": func(key string, n int32) int32 { // librdkafka, kcat: consistent
		return int32(crc32.ChecksumIEEE([]byte(key)) % uint32(n))
	},
	"fnv1a": func(key string, n int32) int32 { // Sarama's and Goka's default
		h := fnv.New32a()
		h.Write([]byte(key))
		p := int32(h.Sum32()) % n
		if p < 0 {
			p = -p
		}
		return p
	},
}

// 1,000 valid follow-ups, placed with murmur2, CRC32, FNV-1a or by hand,
// interleaved with 200 bad records of every kind, all produced raw: every
// bad record lands in the dead-letter topic with its reason, every valid
// follow-up fires exactly once, never early, and the processors keep running.
func TestBadInput(t *testing.T) {
	brokers := needKafka(t)
	pfx, parts := prefix(t), 6
	topics := topology.NewTopics(pfx)
	prov := newProvider(t)
	ivr := start(t, "run", append([]string{"run", "--http", ""}, roleArgs(t, brokers, pfx, parts, "--provider", "webhook", "--webhook-url", prov.url())...)...)

	rng := rand.New(rand.NewPCG(42, 1))
	now := time.Now()
	issued := timestamppb.New(now)
	begin := now.Add(5 * time.Second)
	n := int32(parts)
	var recs []rawRecord
	want := map[followUp]time.Time{}

	// Valid follow-ups, a quarter per partitioner and a quarter placed by hand.
	names := []string{"murmur2", "crc32", "fnv1a", "manual"}
	misrouted := 0
	for i := 0; i < 1000; i++ {
		user := fmt.Sprintf("good-%04d", i)
		due := begin.Add(time.Duration(rng.IntN(10000)) * time.Millisecond)
		want[followUp{user, "call"}] = due
		cmd := &pb.Command{UserId: user, RequestedAt: issued, Command: &pb.Command_Onboard{Onboard: &pb.Onboard{
			Phone: "+14155550100", FollowUps: []*pb.FollowUp{{TaskId: "call", When: &pb.FollowUp_DueAt{DueAt: timestamppb.New(due)}}}}}}
		var part int32
		if name := names[i%4]; name == "manual" {
			part = rng.Int32N(n)
		} else {
			part = partitioners[name](user, n)
		}
		if part != topology.Partition(user, n) {
			misrouted++
		}
		recs = append(recs, rawRecord{key: user, value: marshal(t, cmd), partition: part})
	}

	// Bad records: 200 of every kind.
	onboard := func(user string, o *pb.Onboard) *pb.Command {
		return &pb.Command{UserId: user, RequestedAt: issued, Command: &pb.Command_Onboard{Onboard: o}}
	}
	delay := func(d time.Duration) *pb.FollowUp {
		return &pb.FollowUp{TaskId: "t", When: &pb.FollowUp_Delay{Delay: durationpb.New(d)}}
	}
	dueAt := func(t time.Time) *pb.FollowUp {
		return &pb.FollowUp{TaskId: "t", When: &pb.FollowUp_DueAt{DueAt: timestamppb.New(t)}}
	}
	// A forged clock: requested_at and the record timestamp 300 days ahead,
	// a 300-day delay. Trusted, it would pass --max-delay (400 days); the
	// onboarding topic takes the broker's time (LogAppendTime), so the
	// skew shows.
	forged := now.Add(300 * 24 * time.Hour)
	kinds := []struct {
		reason    deadletter.Reason
		make      func(user string) (key string, value []byte)
		timestamp time.Time
	}{
		{deadletter.ReasonUndecodable, func(u string) (string, []byte) { return u, []byte{0xff, 0xff, 0x01, 0x02} }, time.Time{}},
		{deadletter.ReasonUnknownCommand, func(u string) (string, []byte) {
			// A command case from a newer producer: field 99, unknown here.
			b := marshal(t, &pb.Command{UserId: u, RequestedAt: issued})
			b = protowire.AppendTag(b, 99, protowire.BytesType)
			return u, protowire.AppendBytes(b, []byte("future"))
		}, time.Time{}},
		{deadletter.ReasonMissingUserID, func(string) (string, []byte) {
			return "", marshal(t, onboard("", &pb.Onboard{Phone: "+14155550100"}))
		}, time.Time{}},
		{deadletter.ReasonKeyMismatch, func(u string) (string, []byte) {
			return u, marshal(t, onboard(u+"-other", &pb.Onboard{Phone: "+14155550100"}))
		}, time.Time{}},
		{deadletter.ReasonMissingPhone, func(u string) (string, []byte) { return u, marshal(t, onboard(u, &pb.Onboard{})) }, time.Time{}},
		{deadletter.ReasonInvalidPhone, func(u string) (string, []byte) {
			return u, marshal(t, onboard(u, &pb.Onboard{Phone: "0049 151 1234"}))
		}, time.Time{}},
		{deadletter.ReasonUnknownTimeZone, func(u string) (string, []byte) {
			return u, marshal(t, onboard(u, &pb.Onboard{Phone: "+14155550100", TimeZone: "Europe/Atlantis"}))
		}, time.Time{}},
		{deadletter.ReasonNegativeDelay, func(u string) (string, []byte) {
			return u, marshal(t, onboard(u, &pb.Onboard{Phone: "+14155550100", FollowUps: []*pb.FollowUp{delay(-time.Minute)}}))
		}, time.Time{}},
		{deadletter.ReasonDelayTooLong, func(u string) (string, []byte) {
			return u, marshal(t, onboard(u, &pb.Onboard{Phone: "+14155550100", FollowUps: []*pb.FollowUp{delay(401 * 24 * time.Hour)}}))
		}, time.Time{}},
		{deadletter.ReasonDueTooFarPast, func(u string) (string, []byte) {
			return u, marshal(t, onboard(u, &pb.Onboard{Phone: "+14155550100", FollowUps: []*pb.FollowUp{dueAt(now.Add(-48 * time.Hour))}}))
		}, time.Time{}},
		{deadletter.ReasonDueTooFarFuture, func(u string) (string, []byte) {
			return u, marshal(t, onboard(u, &pb.Onboard{Phone: "+14155550100", FollowUps: []*pb.FollowUp{dueAt(now.Add(500 * 24 * time.Hour))}}))
		}, time.Time{}},
		{deadletter.ReasonMissingTaskID, func(u string) (string, []byte) {
			return u, marshal(t, &pb.Command{UserId: u, RequestedAt: issued, Command: &pb.Command_Reschedule{Reschedule: &pb.Reschedule{When: &pb.Reschedule_Delay{Delay: durationpb.New(time.Minute)}}}})
		}, time.Time{}},
		{deadletter.ReasonDuplicateTaskID, func(u string) (string, []byte) {
			return u, marshal(t, onboard(u, &pb.Onboard{Phone: "+14155550100", FollowUps: []*pb.FollowUp{delay(time.Hour), delay(2 * time.Hour)}}))
		}, time.Time{}},
		{deadletter.ReasonMissingWhen, func(u string) (string, []byte) {
			return u, marshal(t, onboard(u, &pb.Onboard{Phone: "+14155550100", FollowUps: []*pb.FollowUp{{TaskId: "t"}}}))
		}, time.Time{}},
		{deadletter.ReasonReservedUserID, func(u string) (string, []byte) {
			k := topology.ReservedPrefix + u
			return k, marshal(t, onboard(k, &pb.Onboard{Phone: "+14155550100"}))
		}, time.Time{}},
		{deadletter.ReasonPayloadTooLarge, func(u string) (string, []byte) {
			f := delay(time.Hour)
			f.Payload = make([]byte, 17<<10)
			return u, marshal(t, onboard(u, &pb.Onboard{Phone: "+14155550100", FollowUps: []*pb.FollowUp{f}}))
		}, time.Time{}},
		{deadletter.ReasonRequestedAtSkew, func(u string) (string, []byte) {
			return u, marshal(t, &pb.Command{UserId: u, RequestedAt: timestamppb.New(forged), Command: &pb.Command_Onboard{Onboard: &pb.Onboard{
				Phone: "+14155550100", FollowUps: []*pb.FollowUp{delay(300 * 24 * time.Hour)}}}})
		}, forged},
		{deadletter.ReasonTimeOutOfRange, func(u string) (string, []byte) {
			y2300 := time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)
			return u, marshal(t, &pb.Command{UserId: u, RequestedAt: timestamppb.New(y2300), Command: &pb.Command_Onboard{Onboard: &pb.Onboard{
				Phone: "+14155550100", FollowUps: []*pb.FollowUp{dueAt(y2300)}}}})
		}, time.Time{}},
	}
	const perKind = 200
	for _, k := range kinds {
		for i := 0; i < perKind; i++ {
			key, value := k.make(fmt.Sprintf("bad-%s-%03d", k.reason, i))
			recs = append(recs, rawRecord{key: key, value: value, partition: rng.Int32N(n), reason: k.reason, timestamp: k.timestamp})
		}
	}
	// Cancels of tasks nobody scheduled: reported on followup-events, not dead letters.
	for i := 0; i < perKind; i++ {
		user := fmt.Sprintf("nobody-%03d", i)
		recs = append(recs, rawRecord{key: user, partition: topology.Partition(user, n),
			value: marshal(t, &pb.Command{UserId: user, RequestedAt: issued, Command: &pb.Command_Cancel{Cancel: &pb.Cancel{TaskId: "x"}}})})
	}
	rng.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	produceRaw(t, brokers, string(topics.Onboarding), recs)
	t.Logf("produced %d records: 1000 valid (%d on another partition than murmur2's), %d bad in %d kinds, %d cancels of unknown tasks",
		len(recs), misrouted, perKind*len(kinds), len(kinds), perKind)
	if misrouted < 300 {
		t.Fatalf("only %d valid records misrouted; the test needs many", misrouted)
	}

	r := prov.waitAll(t, want, begin.Add(90*time.Second), ivr)
	r.check(t)

	// Every bad record is a dead letter with the right reason and its source.
	wantReason := map[string]deadletter.Reason{}
	for _, rec := range recs {
		if rec.reason != "" && rec.key != "" {
			wantReason[rec.key] = rec.reason
		}
	}
	byReason := map[string]int{}
	dls := consumeAll(t, brokers, string(topics.SchedulerDLQ), perKind*len(kinds), 60*time.Second)
	for _, m := range dls {
		var dl pb.DeadLetter
		if err := proto.Unmarshal(m.Value, &dl); err != nil {
			t.Fatalf("dead letter does not decode: %v", err)
		}
		if dl.GetSourceTopic() != string(topics.Onboarding) || string(dl.GetKey()) != string(m.Key) || len(dl.GetValue()) == 0 ||
			string(headerValue(m, "ivrsched-dlq-reason")) != dl.GetReason() {
			t.Fatalf("dead letter lacks its source, key, value or reason header: %v", &dl)
		}
		if w, ok := wantReason[string(m.Key)]; ok && string(w) != dl.GetReason() {
			t.Fatalf("record %q: reason %s, want %s (%s)", m.Key, dl.GetReason(), w, dl.GetDetail())
		}
		if !has(wantReason, string(m.Key)) && dl.GetReason() != string(deadletter.ReasonMissingUserID) {
			t.Fatalf("unexpected dead letter %q: %s %s", m.Key, dl.GetReason(), dl.GetDetail())
		}
		byReason[dl.GetReason()]++
	}
	for _, k := range kinds {
		if byReason[string(k.reason)] != perKind {
			t.Errorf("reason %s: %d dead letters, want %d", k.reason, byReason[string(k.reason)], perKind)
		}
	}
	t.Logf("dead letters by reason: %v", byReason)

	// ivrsched dlq against Apache Kafka: list by reason, replay the invalid
	// numbers (they fail again, dead-lettered with the mark), replay again
	// (nothing: the originals are committed as done, the new ones marked).
	dlq := func(args ...string) []map[string]any {
		t.Helper()
		out, err := exec.Command(binary, append(args, "--brokers", brokers, "--topic-prefix", pfx, "--partitions", fmt.Sprint(parts))...).Output()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		var lines []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("%v: line %q: %v", args, l, err)
			}
			lines = append(lines, m)
		}
		return lines
	}
	if ls := dlq("dlq", "list", "--reason", "invalid_phone"); len(ls) != perKind || ls[0]["source"].(map[string]any)["topic"] != string(topics.Onboarding) {
		t.Fatalf("dlq list --reason invalid_phone: %d lines, first %v", len(ls), ls[0])
	}
	if ls := dlq("dlq", "replay", "--reason", "invalid_phone"); ls[len(ls)-1]["replayed_total"] != float64(perKind) {
		t.Fatalf("dlq replay: %v", ls[len(ls)-1])
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) { // the dead letters have no event to await here
		ls := dlq("dlq", "list", "--reason", "invalid_phone")
		marked := 0
		for _, l := range ls {
			if l["replays"] == float64(1) {
				marked++
			}
		}
		if len(ls) == 2*perKind && marked == perKind {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the replay: %d invalid_phone dead letters, %d marked; want %d and %d", len(ls), marked, 2*perKind, perKind)
		}
	}
	if ls := dlq("dlq", "replay", "--reason", "invalid_phone"); ls[len(ls)-1]["replayed_total"] != float64(0) || ls[len(ls)-1]["skipped_total"] != float64(perKind) {
		t.Fatalf("second dlq replay: %v", ls[len(ls)-1])
	}

	events := consumeAll(t, brokers, string(topics.Events), perKind, 30*time.Second)
	for _, m := range events {
		var ev pb.ScheduleEvent
		if err := proto.Unmarshal(m.Value, &ev); err != nil || ev.GetKind() != pb.ScheduleEvent_KIND_UNKNOWN_TASK || !strings.HasPrefix(ev.GetUserId(), "nobody-") {
			t.Fatalf("event %v (%v), want unknown task for a nobody user", &ev, err)
		}
	}
	if err := ivr.exited(); err != nil {
		t.Fatal(err)
	}
}

func has(m map[string]deadletter.Reason, k string) bool { _, found := m[k]; return found }

func marshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func headerValue(m *sarama.ConsumerMessage, key string) []byte {
	for _, h := range m.Headers {
		if string(h.Key) == key {
			return h.Value
		}
	}
	return nil
}

func saramaConfig() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V3_6_0_0
	c.Producer.Return.Successes = true
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Partitioner = sarama.NewManualPartitioner
	return c
}

// produceRaw writes the records to their partitions, in order.
func produceRaw(t *testing.T, brokers, topic string, recs []rawRecord) {
	t.Helper()
	p, err := sarama.NewSyncProducer(strings.Split(brokers, ","), saramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	msgs := make([]*sarama.ProducerMessage, len(recs))
	for i, r := range recs {
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Partition: r.partition, Key: sarama.StringEncoder(r.key), Value: sarama.ByteEncoder(r.value), Timestamp: r.timestamp}
	}
	// A topic just created may not have its partition leaders everywhere
	// yet: send what failed again.
	for attempt := 0; ; attempt++ {
		err := p.SendMessages(msgs)
		var perrs sarama.ProducerErrors
		if err == nil {
			return
		}
		if !errors.As(err, &perrs) || attempt == 20 {
			t.Fatalf("produce: %v", err)
		}
		msgs = msgs[:0]
		for _, e := range perrs {
			msgs = append(msgs, e.Msg)
		}
		time.Sleep(250 * time.Millisecond) // the broker's metadata has no event to await
	}
}

// consumeAll reads a topic from the start until it has want records.
func consumeAll(t *testing.T, brokers, topic string, want int, within time.Duration) []*sarama.ConsumerMessage {
	t.Helper()
	var out []*sarama.ConsumerMessage
	kafkatest.Consume(t, brokers, topic, saramaConfig(), within, func(m *sarama.ConsumerMessage) bool {
		out = append(out, m)
		return len(out) >= want
	})
	return out
}
