package explain

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"
	"google.golang.org/protobuf/proto"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/topology"
)

// Read reads only the user's partition, from the first record at or after
// since (Kafka's offsets by time) to the end, keeps only the user's
// records, and names what it read; a topic not there is noted, not fatal.
func TestReadIsBoundedByPartitionAndTime(t *testing.T) {
	const parts = 4
	topics := topology.NewTopics("x-")
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, string(topics.Onboarding), string(topics.Events), string(topics.Calls), string(topics.Results)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	k := kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: cluster.ListenAddrs(), Partitions: parts, Replication: 1, FlushFrequency: time.Millisecond}
	cfg := k.Sarama()
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	prod, err := sarama.NewSyncProducer(k.Brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()

	user, other := "u1", ""
	p := topology.Partition(user, parts)
	for i := 0; other == ""; i++ { // another user of the same partition
		if id := "v" + string(rune('a'+i)); topology.Partition(id, parts) == p {
			other = id
		}
	}
	since := time.Date(2027, 3, 10, 12, 0, 0, 0, time.UTC)
	send := func(topic, key string, part int32, at time.Time, m proto.Message) {
		t.Helper()
		b, _ := proto.Marshal(m)
		if _, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key), Partition: part, Value: sarama.ByteEncoder(b), Timestamp: at}); err != nil {
			t.Fatal(err)
		}
	}
	onb := string(topics.Onboarding)
	cancel := func(task string) *pb.Command {
		return &pb.Command{UserId: user, Command: &pb.Command_Cancel{Cancel: &pb.Cancel{TaskId: task}}}
	}
	send(onb, user, p, since.Add(-time.Hour), cancel("before"))
	send(onb, user, p, since.Add(time.Minute), cancel("after"))
	send(onb, other, p, since.Add(2*time.Minute), cancel("other user"))
	send(onb, user, (p+1)%parts, since.Add(3*time.Minute), cancel("other partition"))
	send(string(topics.Events), user, p, since.Add(4*time.Minute), &pb.ScheduleEvent{UserId: user, TaskId: "after", Kind: pb.ScheduleEvent_KIND_CANCELLED})
	if _, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: string(topics.Results), Key: sarama.StringEncoder(user), Partition: p,
		Value: sarama.ByteEncoder([]byte{0xff, 0xff}), Timestamp: since.Add(5 * time.Minute)}); err != nil {
		t.Fatal(err)
	}

	client, err := k.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var lastRead, lastTotal int64
	f, err := Read(context.Background(), client, topics, user, since, since.Add(time.Hour), func(read, total int64) { lastRead, lastTotal = read, total })
	if err != nil {
		t.Fatal(err)
	}
	if f.Partition != p || len(f.Commands) != 1 || f.Commands[0].Msg.GetCancel().GetTaskId() != "after" || f.Commands[0].Offset != 1 {
		t.Fatalf("partition %d (want %d), commands %v", f.Partition, p, f.Commands)
	}
	if len(f.Events) != 1 || len(f.Undecodable) != 1 || f.Undecodable[0].Topic != string(topics.Results) {
		t.Errorf("events %v, undecodable %v", f.Events, f.Undecodable)
	}
	src := map[string]Source{}
	for _, s := range f.Sources {
		src[s.Topic] = s
	}
	if s := src[onb]; s.Partition != p || s.From != 1 || s.To != 3 || s.Records != 2 || s.User != 1 {
		t.Errorf("onboarding read %+v, want partition %d offsets 1 to 3, 2 records, 1 of the user", s, p)
	}
	if s := src[string(topics.SchedulerDLQ)]; s.Error == "" || !strings.HasPrefix(s.Error, "not read") {
		t.Errorf("a missing topic: %+v", s)
	}
	if lastRead != 4 || lastTotal != 4 {
		t.Errorf("progress %d of %d, want 4 of 4", lastRead, lastTotal)
	}
}
