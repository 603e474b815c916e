package topology

import (
	"testing"

	"github.com/IBM/sarama"
)

// Vectors from Apache Kafka's UtilsTest.testMurmur2 (signed int results).
func TestMurmur2MatchesKafka(t *testing.T) {
	cases := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	for in, want := range cases {
		if got := int32(murmur2Sum([]byte(in))); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", in, got, want)
		}
	}
}

// The Sarama producer, given our hasher, must pick Java's partition:
// (murmur2 & 0x7fffffff) % n, also for keys whose raw hash is negative.
func TestSaramaPartitionerWithMurmur2MatchesJava(t *testing.T) {
	p := sarama.NewCustomHashPartitioner(Murmur2())("t")
	for _, key := range []string{"21", "foobar", "abc", "user-1", "user-42", ""} {
		for _, n := range []int32{1, 3, 8, 12} {
			got, err := p.Partition(&sarama.ProducerMessage{Key: sarama.StringEncoder(key)}, n)
			if err != nil {
				t.Fatal(err)
			}
			want := int32(uint32(int32(murmur2Sum([]byte(key)))&0x7fffffff) % uint32(n))
			if got != want || got != Partition(key, n) {
				t.Errorf("key %q n %d: sarama %d, java %d, Partition %d", key, n, got, want, Partition(key, n))
			}
		}
	}
}
