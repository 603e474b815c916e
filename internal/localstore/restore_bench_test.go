package localstore_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/internal/kafkatest"
	"github.com/ivrsched/ivrsched/internal/localstore"
	"github.com/ivrsched/ivrsched/topology"
)

// Flags of BenchmarkRestore, after -args.
var (
	restoreProfile = flag.String("restore.cpuprofile", "", "BenchmarkRestore: write a CPU profile of the restores alone (not the fill) to this file, one per case (name.case)")
	restoreTrace   = flag.String("restore.trace", "", "BenchmarkRestore: write an execution trace of the restores alone to this file, one per case")
	restoreBuffer  = flag.Int("restore.chanbuf", 0, "BenchmarkRestore: the restoring consumer's Sarama ChannelBufferSize, to compare (0: topology's, Sarama's 256)")
	restoreFetch   = flag.Int("restore.fetch", 0, "BenchmarkRestore: the restoring consumer's Sarama Consumer.Fetch.Default in bytes, to compare (0: topology's, Sarama's 1 MiB)")
	restoreBatch   = flag.Int("restore.batch", 10, "BenchmarkRestore: records per partition in a producer batch of the changelog")
	restoreDirect  = flag.Bool("restore.direct", false, "BenchmarkRestore: also restore by reading the changelog with fetch requests and applying the records in one goroutine per partition, without Goka's loop and Sarama's partition consumer (what that machinery costs)")
	restoreCatchUp = flag.Bool("restore.catchup", false, "BenchmarkRestore: also restore through the same Goka view into stores that read their changelog themselves first (Stores.ReadChangelog), as ivrsched's are")
	restoreScale   = flag.Float64("restore.scale", 1, "BenchmarkRestore: multiply the record counts by this")
)

// restoreCase is a changelog to restore: the table of the retention
// benchmark's new instance (docs/benchmarks.md, "Retention"), the four
// partitions it takes of eight: 25,000 users with follow-ups pending and
// 500,000 users retention removed.
type restoreCase struct {
	name string
	// values of users with follow-ups pending ("user-N", two each).
	pending int
	// idle users ("idle-N"): a value each unless compacted away, then a
	// tombstone each.
	idle      int
	compacted bool
}

var restoreCases = []restoreCase{
	{name: "compacted", pending: 25000, idle: 500000, compacted: true},
	{name: "uncompacted", pending: 25000, idle: 500000},
}

// restorePartitions is how many partitions the changelog has, all restored
// at once by one Goka view, as a new instance restores the partitions it
// takes.
const restorePartitions = 4

// BenchmarkRestore measures what restoring a group table from its changelog
// costs in ivrsched: a Goka view with ivrsched's Sarama configuration
// (kafkaclient.Kafka) restores the changelog's four partitions into empty local
// stores (Stores.Builder), through the path a processor's partitions take
// (Goka's PartitionTable.load). It prints each restore's wall time, the CPU
// this process and the broker used, per record, and reports the medians.
//
// It starts its own Apache Kafka broker, configured as the retention
// benchmark's (production heap, collector and log segments), and writes the
// changelog in batches of about 10 records per partition (-restore.batch):
// the retention benchmark's tombstones came about a thousand a second per
// partition, with the producer flushing every millisecond. Run it with
//
//	go test -run '^$' -bench Restore -benchtime 5x ./internal/localstore/ [-args -restore.cpuprofile=FILE]
//
// -restore.catchup adds restores into stores that read their changelog
// themselves before Goka restores the tail, as ivrsched's do.
func BenchmarkRestore(b *testing.B) {
	broker := kafkatest.StartForTest(b,
		kafkatest.WithJVMArgs("-Xms1g", "-Xmx1g", "-XX:-UseSerialGC", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:TieredStopAtLevel=4"),
		kafkatest.WithProperty("log.segment.bytes", "1073741824"))
	k := kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: []string{broker.Addr()}, Partitions: restorePartitions, Replication: 1,
		FlushFrequency: 5 * time.Millisecond, FetchWait: time.Millisecond}
	for _, c := range restoreCases {
		c.pending = int(float64(c.pending) * *restoreScale)
		c.idle = int(float64(c.idle) * *restoreScale)
		b.Run(c.name, func(b *testing.B) {
			topic := "restore-" + c.name
			records := fillChangelog(b, k, topic, c)
			b.Logf("%s: %d records on %d partitions (%d pending users' values, %d idle users' %s)",
				topic, records, restorePartitions, c.pending, c.idle, map[bool]string{true: "tombstones", false: "values and tombstones"}[c.compacted])
			defer record(b, *restoreProfile, c.name, pprof.StartCPUProfile, pprof.StopCPUProfile)()
			defer record(b, *restoreTrace, c.name, trace.Start, trace.Stop)()
			var runs []restoreRun
			for b.Loop() {
				r := restoreOnce(b, k, topic, broker.PID(), false)
				if r.restored != int64(records) {
					b.Fatalf("restored %d records, want %d", r.restored, records)
				}
				b.Logf("restore %d: %.2f s, %.2f µs/record; CPU %.2f µs/record here, %.2f in the broker; store on disk %.1f MB",
					len(runs)+1, r.wall.Seconds(), r.perRecord(r.wall), r.perRecord(r.cpu), r.perRecord(r.brokerCPU), float64(r.diskBytes)/1e6)
				runs = append(runs, r)
			}
			if *restoreCatchUp {
				var caught []restoreRun
				for range len(runs) {
					r := restoreOnce(b, k, topic, broker.PID(), true)
					if r.restored != int64(records) {
						b.Fatalf("restored %d records with the stores' own read, want %d", r.restored, records)
					}
					b.Logf("restore %d with the stores' own read (%d records of them): %.2f s, %.2f µs/record; CPU %.2f µs/record here, %.2f in the broker",
						len(caught)+1, r.direct, r.wall.Seconds(), r.perRecord(r.wall), r.perRecord(r.cpu), r.perRecord(r.brokerCPU))
					caught = append(caught, r)
				}
				report(b, caught, "catchup-s/restore", func(r restoreRun) float64 { return r.wall.Seconds() })
				report(b, caught, "catchup-µs-cpu/record", func(r restoreRun) float64 { return r.perRecord(r.cpu) })
				report(b, caught, "catchup-µs-broker-cpu/record", func(r restoreRun) float64 { return r.perRecord(r.brokerCPU) })
			}
			if *restoreDirect {
				var direct []restoreRun
				for range len(runs) {
					r := restoreDirectly(b, k, topic, broker.PID())
					if r.restored != int64(records) {
						b.Fatalf("restored %d records directly, want %d", r.restored, records)
					}
					b.Logf("direct restore %d: %.2f s, %.2f µs/record; CPU %.2f µs/record here, %.2f in the broker",
						len(direct)+1, r.wall.Seconds(), r.perRecord(r.wall), r.perRecord(r.cpu), r.perRecord(r.brokerCPU))
					direct = append(direct, r)
				}
				report(b, direct, "direct-s/restore", func(r restoreRun) float64 { return r.wall.Seconds() })
				report(b, direct, "direct-µs-cpu/record", func(r restoreRun) float64 { return r.perRecord(r.cpu) })
			}
			report(b, runs, "s/restore", func(r restoreRun) float64 { return r.wall.Seconds() })
			report(b, runs, "µs-wall/record", func(r restoreRun) float64 { return r.perRecord(r.wall) })
			report(b, runs, "µs-cpu/record", func(r restoreRun) float64 { return r.perRecord(r.cpu) })
			report(b, runs, "µs-broker-cpu/record", func(r restoreRun) float64 { return r.perRecord(r.brokerCPU) })
			report(b, runs, "MB-on-disk", func(r restoreRun) float64 { return float64(r.diskBytes) / 1e6 })
		})
	}
}

// report prints the median of f over the runs with its range, and reports
// the median.
func report(b *testing.B, runs []restoreRun, unit string, f func(restoreRun) float64) {
	if len(runs) == 0 {
		return
	}
	xs := make([]float64, len(runs))
	for i, r := range runs {
		xs[i] = f(r)
	}
	slices.Sort(xs)
	med := xs[len(xs)/2]
	if len(xs)%2 == 0 {
		med = (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	b.Logf("%s: median %.2f, range %.2f to %.2f (%d runs)", unit, med, xs[0], xs[len(xs)-1], len(xs))
	b.ReportMetric(med, unit)
}

type restoreRun struct {
	restored       int64
	direct         int64 // of them read by the stores themselves
	wall           time.Duration
	cpu, brokerCPU time.Duration
	diskBytes      int64
}

func (r restoreRun) perRecord(d time.Duration) float64 {
	return float64(d.Microseconds()) / float64(r.restored)
}

// fillChangelog writes the case's changelog to a new compacted topic and
// returns how many records it holds: the pending users' values, then the
// idle users' values (unless compacted) and their tombstones.
func fillChangelog(b *testing.B, k kafkaclient.Kafka, topic string, c restoreCase) int {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spec := topology.TopicSpec{Name: topic, Compact: true}
	if err := topology.EnsureTopics(ctx, k, []topology.TopicSpec{spec}); err != nil {
		b.Fatal(err)
	}
	cfg := k.Sarama()
	cfg.Producer.Flush.Frequency = 10 * time.Millisecond
	cfg.Producer.Flush.Bytes = 256 << 10
	cfg.Net.MaxOpenRequests = 5
	// Batches of about restoreBatch records per partition: a request
	// holds this many per partition on average.
	cfg.Producer.Flush.MaxMessages = *restoreBatch * restorePartitions
	p, err := sarama.NewAsyncProducer(k.Brokers, cfg)
	if err != nil {
		b.Fatal(err)
	}
	errs := make(chan error, 1)
	acked := make(chan int, 1)
	go func() {
		n := 0
		for range p.Successes() {
			n++
		}
		acked <- n
	}()
	go func() {
		var first error
		for e := range p.Errors() {
			if first == nil {
				first = e
			}
		}
		errs <- first
	}()
	sent := 0
	send := func(key string, value []byte) {
		msg := &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key)}
		if value != nil {
			msg.Value = sarama.ByteEncoder(value)
		}
		p.Input() <- msg
		sent++
	}
	now := time.Now()
	for u := range c.pending {
		send(fmt.Sprint("user-", u), userValue(fmt.Sprint("user-", u), now, 2, 0))
	}
	if !c.compacted {
		for u := range c.idle {
			send(fmt.Sprint("idle-", u), userValue(fmt.Sprint("idle-", u), now, 0, 1))
		}
	}
	for u := range c.idle {
		send(fmt.Sprint("idle-", u), nil)
	}
	p.AsyncClose()
	if n, err := <-acked, <-errs; err != nil || n != sent {
		b.Fatalf("changelog fill: %d of %d written: %v", n, sent, err)
	}
	return sent
}

// userValue is a scheduler table value like the retention benchmark's: a
// user with pending follow-ups (64-byte payloads) or with fired ones.
func userValue(user string, now time.Time, pending, fired int) []byte {
	v := &pb.UserState{UserId: user, Phone: "+14155550123", TimeZone: "America/Los_Angeles",
		OnboardedAt: timestamppb.New(now), UpdatedAt: timestamppb.New(now), Region: "US"}
	for i := range pending {
		v.Pending = append(v.Pending, &pb.Task{TaskId: fmt.Sprint("task-", i), DueAt: timestamppb.New(now.Add(3 * time.Hour)),
			Payload: make([]byte, 64), Attempt: 1})
	}
	for i := range fired {
		v.Fired = append(v.Fired, &pb.FiredTask{Task: &pb.Task{TaskId: fmt.Sprint("idle-", i), DueAt: timestamppb.New(now),
			Payload: make([]byte, 64), Attempt: 1}, CallId: "c0ffee00c0ffee00c0ffee00c0ffee00", FiredAt: timestamppb.New(now)})
	}
	raw, err := proto.Marshal(v)
	if err != nil {
		panic(err)
	}
	return raw
}

// restoreOnce restores the topic into empty stores with a Goka view and
// returns what it cost, from the view's start to every partition
// recovered. With catchUp the stores read their changelog themselves
// first (Stores.ReadChangelog).
func restoreOnce(b *testing.B, k kafkaclient.Kafka, topic string, brokerPID int, catchUp bool) restoreRun {
	b.Helper()
	dir, err := os.MkdirTemp(b.TempDir(), "stores")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	stores := localstore.New(dir, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if catchUp {
		stores.ReadChangelog(ctx, k.Brokers, k.Sarama())
	}
	opts := append(k.ViewOptions(), goka.WithViewStorageBuilder(stores.Builder()), goka.WithViewLogger(quietGoka{}))
	if *restoreBuffer > 0 || *restoreFetch > 0 {
		opts = append(opts, goka.WithViewConsumerSaramaBuilder(func(brokers []string, clientID string) (sarama.Consumer, error) {
			c := k.Sarama()
			if *restoreBuffer > 0 {
				c.ChannelBufferSize = *restoreBuffer
			}
			if *restoreFetch > 0 {
				c.Consumer.Fetch.Default = int32(*restoreFetch)
			}
			return goka.SaramaConsumerBuilderWithConfig(c)(brokers, clientID)
		}))
	}
	v, err := goka.NewView(k.Brokers, goka.Table(topic), new(codec.Bytes), opts...)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)

	cpu0, broker0 := processCPU(), brokerCPU(b, brokerPID)
	start := time.Now()
	go func() { done <- v.Run(ctx) }()
	select {
	case <-v.WaitRunning():
	case err := <-done:
		cancel()
		b.Fatalf("view stopped before it recovered: %v", err)
	}
	r := restoreRun{wall: time.Since(start), cpu: processCPU() - cpu0, brokerCPU: brokerCPU(b, brokerPID) - broker0,
		restored: stores.Restored(), direct: stores.ReadDirectly()}
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	r.diskBytes = dirBytes(dir)
	return r
}

// restoreDirectly restores the topic into empty stores without Goka: one
// goroutine per partition fetches the changelog from its oldest offset to
// its end with Sarama's fetch requests and applies each record as Goka's
// restore does (Set or Delete, then SetOffset).
func restoreDirectly(b *testing.B, k kafkaclient.Kafka, topic string, brokerPID int) restoreRun {
	b.Helper()
	dir, err := os.MkdirTemp(b.TempDir(), "stores")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	stores := localstore.New(dir, slog.New(slog.NewTextHandler(io.Discard, nil)))
	build := stores.Builder()
	client, err := sarama.NewClient(k.Brokers, k.Sarama())
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()

	cpu0, broker0 := processCPU(), brokerCPU(b, brokerPID)
	start := time.Now()
	errs := make(chan error, restorePartitions)
	for p := range int32(restorePartitions) {
		go func() { errs <- fetchInto(client, build, topic, p) }()
	}
	for range restorePartitions {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	return restoreRun{wall: time.Since(start), cpu: processCPU() - cpu0, brokerCPU: brokerCPU(b, brokerPID) - broker0,
		restored: stores.Restored()}
}

func fetchInto(client sarama.Client, build storage.Builder, topic string, p int32) error {
	st, err := build(topic, p)
	if err != nil {
		return err
	}
	if err := st.Open(); err != nil {
		return err
	}
	defer st.Close()
	from, err := client.GetOffset(topic, p, sarama.OffsetOldest)
	if err != nil {
		return err
	}
	end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
	if err != nil {
		return err
	}
	leader, err := client.Leader(topic, p)
	if err != nil {
		return err
	}
	for from < end {
		req := &sarama.FetchRequest{Version: 11, MaxWaitTime: 1, MinBytes: 1, MaxBytes: sarama.MaxResponseSize, SessionEpoch: -1}
		req.AddBlock(topic, p, from, 1<<20, -1)
		resp, err := leader.Fetch(req)
		if err != nil {
			return err
		}
		block := resp.GetBlock(topic, p)
		if block == nil || !errors.Is(block.Err, sarama.ErrNoError) {
			return fmt.Errorf("fetch %s/%d at %d: %v", topic, p, from, block)
		}
		for _, recs := range block.RecordsSet {
			batch := recs.RecordBatch
			if batch == nil {
				continue
			}
			for _, r := range batch.Records {
				if batch.Control {
					break
				}
				off := batch.FirstOffset + r.OffsetDelta
				if off < from {
					continue
				}
				if r.Value == nil {
					err = st.Delete(string(r.Key))
				} else {
					err = st.Set(string(r.Key), r.Value)
				}
				if err == nil {
					err = st.SetOffset(off)
				}
				if err != nil {
					return err
				}
				from = off + 1
			}
			// Past records compaction removed from the batch.
			from = max(from, batch.FirstOffset+int64(batch.LastOffsetDelta)+1)
		}
	}
	return st.MarkRecovered()
}

// processCPU is the CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// brokerCPU is the CPU time the broker's JVM has used (user and system
// ticks of /proc/PID/stat, at 100 per second).
func brokerCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Logf("broker CPU unknown: %v", err)
		return 0
	}
	// The fields after the command name, which is in parentheses.
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

func dirBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// quietGoka drops Goka's log lines.
type quietGoka struct{}

func (quietGoka) Print(...any)          {}
func (quietGoka) Println(...any)        {}
func (quietGoka) Printf(string, ...any) {}

// record starts a recording (a CPU profile, an execution trace) into the
// file path.name when path is set, and returns what stops it.
func record(b *testing.B, path, name string, start func(io.Writer) error, stop func()) func() {
	b.Helper()
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path + "." + name)
	if err != nil {
		b.Fatal(err)
	}
	if err := start(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		stop()
		f.Close()
	}
}
