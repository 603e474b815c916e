package localstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// A store that opens behind its changelog by catchUpMin records or more
// reads the changelog itself before Goka restores it (ReadChangelog): from
// its offset to the high-water mark of that moment, with fetch requests to
// the partition's leader, applying each response's records in LevelDB
// batches with the offset reached. Goka's restore, which costs three times
// as much per record (its loop over five channels and Sarama's partition
// consumer: docs/design.md, "Restoring a partition"), then has only the tail
// left.
//
// The read is an optimisation with Goka's restore as its fallback: any
// error (a broker error, a leader change, a timeout, a record it cannot
// decode) ends it, and Goka restores from the offset the store reached.
// What the store holds is always a prefix of the changelog with its offset.
var (
	// catchUpMin: a store fewer records behind leaves them to Goka (a
	// variable for tests).
	catchUpMin int64 = 10000
	// catchUpFor bounds a store's own read: after it Goka restores the
	// rest. Goka's restore stops when the partition is revoked, a
	// storage's Open cannot be told, so this is how long a revoke may
	// wait for it (about 4 million records a partition at the 0.4 µs a
	// record BenchmarkRestore measures, here). A fetch stuck on a broker
	// ends after catchUpReadTimeout. Variables for tests.
	catchUpFor         = 10 * time.Second
	catchUpReadTimeout = 5 * time.Second
)

// catchUpFetchBytes is how much a fetch asks for: Sarama's consumer fetches
// 1 MiB a partition; larger responses mean fewer round trips (a variable
// for tests).
var catchUpFetchBytes int32 = 8 << 20

// changelogReader is the Kafka connection the stores read their changelogs
// with: one Sarama client for all of them, made on first use and closed
// when the stores' context ends. Safe for concurrent use.
type changelogReader struct {
	ctx     context.Context
	brokers []string
	cfg     *sarama.Config

	mu     sync.Mutex
	client sarama.Client
}

// ReadChangelog makes a store that opens far behind its changelog read it
// itself before Goka's restore (see catchUpMin), through brokers with cfg
// (the processors' Sarama configuration: TLS and SASL included). When ctx
// ends, reads under way stop (Goka's restore, stopped with the processor,
// continues from what they wrote at the next start) and no more begin.
// Call it before the stores are built.
func (s *Stores) ReadChangelog(ctx context.Context, brokers []string, cfg *sarama.Config) {
	c := *cfg // a copy: a fetch stuck on a broker gives up sooner
	c.Net.ReadTimeout = min(c.Net.ReadTimeout, catchUpReadTimeout)
	s.changelog = &changelogReader{ctx: ctx, brokers: brokers, cfg: &c}
}

func (r *changelogReader) get() (sarama.Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	if r.client != nil {
		return r.client, nil
	}
	c, err := sarama.NewClient(r.brokers, r.cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to read changelogs: %w", err)
	}
	r.client = c
	context.AfterFunc(r.ctx, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		c.Close() // aborts the fetches under way
	})
	return c, nil
}

// errCatchUpTime ends a read that took catchUpFor.
var errCatchUpTime = errors.New("time is up, Goka's restore takes the rest")

// catchUp reads the changelog from the store's offset to its high-water
// mark read at open (end.go) when the store is catchUpMin records behind or
// more. Called by Open before the store is in use; any error ends the read,
// with what was read written and the offset it reached.
func (s *store) catchUp() {
	r := s.stores.changelog
	if r == nil || r.ctx.Err() != nil { // none, or the process stops
		return
	}
	if !s.end.known() { // readEnd logged why
		return
	}
	client, err := r.get()
	if err != nil {
		s.log.Warn("cannot read the changelog directly; Goka restores it", "err", err)
		return
	}
	oldest, hwm := s.end.oldest, s.end.hwm
	// Where Goka would start (PartitionTable.findOffsetToLoad).
	from := max(s.offset+1, oldest)
	if hwm-from < catchUpMin {
		return
	}
	start, first := time.Now(), s.restored
	ctx, cancel := context.WithTimeout(r.ctx, catchUpFor)
	defer cancel()
	err = s.readChangelog(ctx, r.ctx, client, from, hwm)
	s.mu.Lock()
	if werr := s.writeRestored(); werr != nil {
		err = errors.Join(err, werr)
	}
	reached := s.storedOffset
	s.mu.Unlock()
	s.stores.direct.Add(int64(s.restored - first))
	args := []any{"from", from, "reached", reached, "high_water_mark", hwm, "records", s.restored - first,
		"took", time.Since(start).Round(time.Millisecond)}
	if err != nil {
		s.log.Warn("direct changelog read stopped; Goka restores the rest", append(args, "err", err)...)
		return
	}
	s.log.Info("local store read its changelog directly; Goka restores the tail", args...)
}

// readChangelog applies the changelog's records from offset from up to
// hwm to the store (restore), advancing its offset with each, until ctx
// ends (stores, the stores' context).
func (s *store) readChangelog(ctx, stores context.Context, client sarama.Client, from, hwm int64) error {
	for from < hwm {
		if err := ctx.Err(); err != nil {
			if stores.Err() == nil {
				return errCatchUpTime
			}
			return err
		}
		leader, err := client.Leader(s.topic, s.partition)
		if err != nil {
			return fmt.Errorf("leader: %w", err)
		}
		req := &sarama.FetchRequest{Version: 11, MaxWaitTime: 100, MinBytes: 1, MaxBytes: catchUpFetchBytes,
			Isolation: sarama.ReadUncommitted, SessionEpoch: -1}
		req.AddBlock(s.topic, s.partition, from, catchUpFetchBytes, -1)
		resp, err := leader.Fetch(req)
		if err != nil {
			return fmt.Errorf("fetch at %d: %w", from, err)
		}
		block := resp.GetBlock(s.topic, s.partition)
		if block == nil {
			return fmt.Errorf("fetch at %d: no data for the partition", from)
		}
		if !errors.Is(block.Err, sarama.ErrNoError) {
			return fmt.Errorf("fetch at %d: %w", from, block.Err)
		}
		next, err := s.applyFetched(block, from, hwm)
		if err != nil {
			return err
		}
		if next == from {
			return fmt.Errorf("fetch at %d: no records", from)
		}
		from = next
	}
	return nil
}

// applyFetched applies a fetch response's records from offset from on, below
// hwm, and returns the offset after the last one it applied or skipped.
// A batch cut off at the end of the response is left for the next fetch.
func (s *store) applyFetched(block *sarama.FetchResponseBlock, from, hwm int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, recs := range block.RecordsSet {
		batch := recs.RecordBatch
		if batch == nil {
			return from, fmt.Errorf("fetch at %d: a message set, not a record batch (a broker before Kafka 0.11?)", from)
		}
		if batch.PartialTrailingRecord {
			break
		}
		if !batch.Control {
			for _, rec := range batch.Records {
				off := batch.FirstOffset + rec.OffsetDelta
				if off < from || off >= hwm {
					continue
				}
				// The offset first: a batch written by restore holds
				// no record after the offset it stores.
				s.offset = off
				if err := s.restore(string(rec.Key), rec.Value); err != nil {
					return from, err
				}
				from = off + 1
			}
		}
		// Past the records compaction removed from the batch, and
		// control batches.
		end := min(batch.FirstOffset+int64(batch.LastOffsetDelta)+1, hwm)
		if end > from {
			from = end
			s.offset = from - 1
		}
	}
	return from, nil
}
