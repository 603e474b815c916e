package scheduler

import (
	"bytes"
	"crypto/sha256"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"google.golang.org/protobuf/proto"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/deadletter"
)

// A command the broker accepts (just under 1 MiB) but larger than the
// producer's Producer.MaxMessageBytes is rejected (too many follow-ups).
// Kept whole, its dead letter would be refused by the producer (the
// harness's producer refuses it as Sarama's does), failing the partition
// at every replay of the command. It is dead-lettered without its value,
// with the value's size and digest and the record's position, the
// partition goes on, and the next user's command is processed.
func TestRejectedCommandNearOneMiBIsDeadLettered(t *testing.T) {
	h := newHarness(t)
	// The command fills a record of the producer's limit to within 16 bytes.
	limit := sarama.NewConfig().Producer.MaxMessageBytes
	f := many("a", DefaultLimits().MaxFollowUps+1)
	for _, x := range f {
		x.Action = &pb.Action{}
	}
	cmd := &pb.Command{UserId: "u1", Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: "+4915112345678", FollowUps: f}}}
	record := func() int {
		m := &sarama.ProducerMessage{Key: sarama.StringEncoder("u1"), Value: sarama.ByteEncoder(mustMarshal(t, cmd))}
		return m.ByteSize(2)
	}
	room := limit - 16 - record()
	for _, x := range f {
		x.Action.IvrScript = strings.Repeat("s", room/len(f)-6) // less what its tag and lengths add
	}
	f[0].Action.IvrScript += strings.Repeat("s", limit-16-record())
	value := mustMarshal(t, cmd)
	if n := record(); n > limit || n < limit-16 || n >= 1<<20 {
		t.Fatalf("command record of %d bytes, want within 16 bytes below the producer's limit %d", n, limit)
	}
	h.send("u1", cmd)
	dl := h.expectRejected("u1", deadletter.ReasonTooManyFollowUps)[0]
	sum := sha256.Sum256(value)
	if !dl.GetTruncated() || dl.GetValueSize() != int64(len(value)) || !bytes.Equal(dl.GetValueSha256(), sum[:]) || len(dl.GetValue()) != 0 {
		t.Fatalf("dead letter truncated %v, value of %d bytes, size %d, sha256 %x: want truncated, the size %d and digest %x of the command",
			dl.GetTruncated(), len(dl.GetValue()), dl.GetValueSize(), dl.GetValueSha256(), len(value), sum)
	}
	if dl.GetSourceTopic() != string(h.topics.Onboarding) || !strings.Contains(dl.GetDetail(), "not kept") {
		t.Fatalf("dead letter from %s, detail %q: want the onboarding topic, and a detail that says the value is not kept", dl.GetSourceTopic(), dl.GetDetail())
	}
	h.onboard("u2", delay("a", time.Second))
	h.expectRejected("u2")
	h.tickAt(time.Second)
	h.expectCalls("a")
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
