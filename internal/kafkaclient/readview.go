package kafkaclient

import (
	"context"
	"fmt"

	"github.com/lovoo/goka"
	gokacodec "github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"
)

// ReadView reads a compacted topic once: it runs a view of the topic, kept
// in memory, until the view has read to the end, runs fn on it, and stops
// it. opts come after the view options of k. Errors name the topic.
func ReadView(ctx context.Context, k Kafka, topic goka.Table, fn func(*goka.View) error, opts ...goka.ViewOption) error {
	all := append(append(k.ViewOptions(), goka.WithViewStorageBuilder(storage.MemoryBuilder())), opts...)
	v, err := goka.NewView(k.Brokers, topic, new(gokacodec.Bytes), all...)
	if err != nil {
		return fmt.Errorf("read %s: %w", topic, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- v.Run(ctx) }()
	select {
	case <-v.WaitRunning():
	case err := <-done:
		if err == nil {
			err = ctx.Err()
		}
		return fmt.Errorf("read %s: %w", topic, err)
	}
	err = fn(v)
	cancel()
	<-done
	if err != nil {
		return fmt.Errorf("read %s: %w", topic, err)
	}
	return nil
}
