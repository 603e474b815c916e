package localstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/internal/kafkatest"
	"github.com/ivrsched/ivrsched/topology"
)

// changelogRig is a kfake broker with a one-partition changelog, restored
// into two sets of stores: one reading the changelog itself first
// (ReadChangelog), one left to Goka's restore alone.
type changelogRig struct {
	cluster *kfake.Cluster
	k       kafkaclient.Kafka
	topic   string
	prod    sarama.SyncProducer
	offset  int64 // records written
	direct  *Stores
	goka    *Stores
}

// hasM marks the values starting with "m".
func hasM(v []byte) bool { return bytes.HasPrefix(v, []byte("m")) }

// newChangelogRig starts the rig on kfake, whose requests a test can
// intercept.
func newChangelogRig(t *testing.T) *changelogRig {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, rigTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	r := newRig(t, c.ListenAddrs())
	r.cluster = c
	return r
}

const rigTopic = "table-table"

// newRig starts the rig on brokers where rigTopic exists.
func newRig(t *testing.T, brokers []string) *changelogRig {
	t.Helper()
	const topic = rigTopic
	k := kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: brokers, Partitions: 1, Replication: 1, FlushFrequency: time.Millisecond, FetchWait: 10 * time.Millisecond}
	cfg := k.Sarama()
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	prod, err := sarama.NewSyncProducer(k.Brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prod.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r := &changelogRig{k: k, topic: topic, prod: prod,
		direct: New(t.TempDir(), newLogger(io.Discard)), goka: New(t.TempDir(), newLogger(io.Discard))}
	r.direct.Mark(hasM)
	r.goka.Mark(hasM)
	r.direct.ReadChangelog(ctx, k.Brokers, k.Sarama())
	return r
}

// write appends the records to the changelog, in batches of a hundred.
func (r *changelogRig) write(t *testing.T, recs ...rec) {
	t.Helper()
	for chunk := range slices.Chunk(recs, 100) {
		var msgs []*sarama.ProducerMessage
		for _, x := range chunk {
			m := &sarama.ProducerMessage{Topic: r.topic, Key: sarama.StringEncoder(x.key)}
			if !x.tomb {
				m.Value = sarama.StringEncoder(x.value)
			}
			msgs = append(msgs, m)
		}
		if err := r.prod.SendMessages(msgs); err != nil {
			t.Fatal(err)
		}
	}
	r.offset += int64(len(recs))
}

// restore restores the changelog into both sets of stores with a Goka view
// and checks that they hold the same: values, marks and offset.
func (r *changelogRig) restore(t *testing.T) {
	t.Helper()
	for _, s := range []*Stores{r.direct, r.goka} {
		r.restoreInto(t, s)
	}
	want, got := dumpStores(t, r.goka, r.topic), dumpStores(t, r.direct, r.topic)
	if want.offset != r.offset-1 {
		t.Fatalf("Goka's restore reached offset %d, want %d", want.offset, r.offset-1)
	}
	if got.offset != want.offset {
		t.Errorf("offset %d after the direct read and Goka's restore, want %d (Goka's restore alone)", got.offset, want.offset)
	}
	if !slices.Equal(got.marks, want.marks) {
		t.Errorf("%d marks, want %d; first differences: %v", len(got.marks), len(want.marks), firstDiff(got.marks, want.marks))
	}
	if !slices.Equal(got.kvs, want.kvs) {
		t.Errorf("%d keys after the direct read, want %d; first differences: %v", len(got.kvs), len(want.kvs), firstDiff(got.kvs, want.kvs))
	}
}

// restoreInto restores the changelog into s with a Goka view.
func (r *changelogRig) restoreInto(t *testing.T, s *Stores) {
	t.Helper()
	v, err := goka.NewView(r.k.Brokers, goka.Table(r.topic), new(codec.Bytes),
		append(r.k.ViewOptions(), goka.WithViewStorageBuilder(s.Builder()), goka.WithViewLogger(quiet{}))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- v.Run(ctx) }()
	select {
	case <-v.WaitRunning():
	case err := <-done:
		cancel()
		t.Fatalf("view stopped before it recovered: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

type dump struct {
	offset int64
	kvs    []string
	marks  []string
}

// dumpStores reads what the partition's store holds, opened by itself.
func dumpStores(t *testing.T, s *Stores, topic string) dump {
	t.Helper()
	plain := New(s.dir, newLogger(io.Discard))
	plain.Mark(hasM)
	st, err := plain.Builder()(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Open(); err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, st)
	d := dump{offset: mustOffset(t, st)}
	markRecovered(t, st)
	it, err := st.Iterator()
	if err != nil {
		t.Fatal(err)
	}
	d.kvs = keys(t, it)
	d.marks = marked(t, st)
	slices.Sort(d.marks)
	return d
}

func firstDiff(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) && len(out) < 5 {
			out = append(out, "+"+x)
		}
	}
	for _, x := range b {
		if !slices.Contains(a, x) && len(out) < 10 {
			out = append(out, "-"+x)
		}
	}
	return out
}

type quiet struct{}

func (quiet) Print(...any)          {}
func (quiet) Println(...any)        {}
func (quiet) Printf(string, ...any) {}

// lowerCatchUp makes stores read their changelog themselves from min
// records behind, fetching bytes at a time, for the test.
func lowerCatchUp(t *testing.T, min int64, bytes int32) {
	oldMin, oldBytes := catchUpMin, catchUpFetchBytes
	catchUpMin, catchUpFetchBytes = min, bytes
	t.Cleanup(func() { catchUpMin, catchUpFetchBytes = oldMin, oldBytes })
}

// users is a changelog of n users' values ("m…" marked for every third),
// then tombstones of every fourth and of as many keys never written.
func users(prefix string, n int) []rec {
	var recs []rec
	for i := range n {
		v := fmt.Sprint("v", i)
		if i%3 == 0 {
			v = fmt.Sprint("m", i)
		}
		recs = append(recs, val(fmt.Sprint(prefix, i), v))
	}
	for i := 0; i < n; i += 4 {
		recs = append(recs, tomb(fmt.Sprint(prefix, i)), tomb(fmt.Sprint("never-", prefix, i)))
	}
	return recs
}

// A store far behind its changelog reads it itself before Goka's restore
// and ends up holding what Goka's restore alone gives: values, deletes,
// marks and offset. Empty at first, and then reused (its tombstones must
// delete what it holds).
func TestStoreReadsItsChangelogFirst(t *testing.T) {
	lowerCatchUp(t, 1000, 16<<10)
	storeReadsItsChangelogFirst(t, newChangelogRig(t))
}

// The same on Apache Kafka.
func TestStoreReadsItsChangelogFirstOnKafka(t *testing.T) {
	lowerCatchUp(t, 1000, 16<<10)
	broker := kafkatest.StartForTest(t)
	k := kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: []string{broker.Addr()}, Partitions: 1, Replication: 1}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := topology.EnsureTopics(ctx, k, []topology.TopicSpec{{Name: rigTopic, Compact: true}}); err != nil {
		t.Fatal(err)
	}
	storeReadsItsChangelogFirst(t, newRig(t, k.Brokers))
}

func storeReadsItsChangelogFirst(t *testing.T, r *changelogRig) {
	r.write(t, users("a-", 3000)...)
	r.restore(t)
	if n := r.direct.ReadDirectly(); n != r.offset {
		t.Errorf("the empty store read %d records itself, want all %d", n, r.offset)
	}
	if n := r.goka.ReadDirectly(); n != 0 {
		t.Errorf("stores without ReadChangelog read %d records themselves", n)
	}

	// The stores now hold a-*: deletes of them must reach LevelDB.
	var recs []rec
	for i := range 3000 {
		recs = append(recs, tomb(fmt.Sprint("a-", i)))
	}
	recs = append(recs, users("b-", 500)...)
	before := r.direct.ReadDirectly()
	r.write(t, recs...)
	r.restore(t)
	if n := r.direct.ReadDirectly() - before; n != int64(len(recs)) {
		t.Errorf("the reused store read %d records itself, want all %d", n, len(recs))
	}
	// Below the threshold: Goka's restore alone.
	before = r.direct.ReadDirectly()
	r.write(t, users("c-", 100)...)
	r.restore(t)
	if n := r.direct.ReadDirectly() - before; n != 0 {
		t.Errorf("a store %d records behind read %d itself, want 0 (under catchUpMin)", 125, n)
	}
}

// A direct read cut off by a broker error leaves a prefix of the changelog
// with its offset, and Goka's restore finishes it.
func TestStoreReadCutOffGokaFinishes(t *testing.T) {
	lowerCatchUp(t, 1000, 16<<10)
	r := newChangelogRig(t)
	r.write(t, users("a-", 4000)...)
	var fetches atomic.Int32
	r.cluster.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		// The store's fetches (Goka's ask for less).
		if req.(*kmsg.FetchRequest).MaxBytes != catchUpFetchBytes || fetches.Add(1) < 3 {
			r.cluster.KeepControl()
			return nil, nil, false
		}
		// The store's third fetch: the connection breaks (the control
		// is then dropped).
		return nil, errors.New("cut off"), true
	})
	r.restore(t)
	n := r.direct.ReadDirectly()
	t.Logf("read %d of %d records itself, Goka the rest", n, r.offset)
	if n <= 0 || n >= r.offset {
		t.Errorf("the store read %d of %d records itself before the error, want some and not all", n, r.offset)
	}
	if got := fetches.Load(); got != 3 {
		t.Errorf("%d fetches controlled, want 3", got)
	}
}

// The stores' context ending stops a read under way and keeps new ones
// from starting.
func TestStoreReadStopsWithItsContext(t *testing.T) {
	lowerCatchUp(t, 1000, 16<<10)
	r := newChangelogRig(t)
	r.write(t, users("a-", 3000)...)
	ctx, cancel := context.WithCancel(context.Background())
	r.direct.ReadChangelog(ctx, r.k.Brokers, r.k.Sarama())
	var fetches atomic.Int32
	r.cluster.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r.cluster.KeepControl()
		if req.(*kmsg.FetchRequest).MaxBytes == catchUpFetchBytes && fetches.Add(1) == 2 {
			cancel() // the process stops during the second fetch
		}
		return nil, nil, false
	})
	st, err := r.direct.Builder()(r.topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := st.Open(); err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, st)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Open took %v with the stores' context ended", took)
	}
	n := r.direct.ReadDirectly()
	if off := mustOffset(t, st); n == 0 || n >= r.offset || off != n-1 {
		t.Errorf("read %d records itself, offset %d; want some of %d and the offset of the last", n, off, r.offset)
	}
	if got := fetches.Load(); got > 2 {
		t.Errorf("%d fetches after the context ended at the second, want none", got-2)
	}
}
