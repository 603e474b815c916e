package kafkaclient

import (
	"strconv"
	"sync"
	"testing"

	"github.com/IBM/sarama"
)

// With ivrsched's producer, the records of one partition are written in
// the order they were emitted and acknowledged in that order, with
// increasing offsets, while the broker takes every request. (Goka reads
// successes and errors on two goroutines: between a success and an error
// there is no order. Across a retriable refusal Sarama does not keep the
// order either: see the package doc.) Each record has a key of its own,
// so that ivrsched's producer, which holds a write of a key until the
// key's write before it is acknowledged, leaves the order to Sarama.
func TestAcknowledgementsOfAPartitionComeInEmitOrder(t *testing.T) {
	_, k := broker(t)
	topics(t, k, "acks")
	p, err := k.ProducerBuilder(k.Brokers, k.ClientID, k.Hasher)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const n = 300
	var (
		mu    sync.Mutex
		order []int
		offs  []int64
		errs  []error
		all   = make(chan struct{})
	)
	for i := range n {
		p.Emit("acks", "key-"+strconv.Itoa(i), []byte(strconv.Itoa(i))).ThenWithMessage(func(m *sarama.ProducerMessage, err error) {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, i)
			if err != nil {
				errs = append(errs, err)
			} else {
				offs = append(offs, m.Offset)
			}
			if len(order) == n {
				close(all)
			}
		})
	}
	within(t, all, "every acknowledgement")
	mu.Lock()
	defer mu.Unlock()
	if len(errs) > 0 {
		t.Fatalf("%d emits failed: %v", len(errs), errs[0])
	}
	for i := range order {
		if order[i] != i || (i > 0 && offs[i] <= offs[i-1]) {
			t.Fatalf("acknowledgement %d is of emit %d at offset %d (previous at %d)", i, order[i], offs[i], offs[max(i-1, 0)])
		}
	}
}
