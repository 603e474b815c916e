package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/IBM/sarama"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

func cmdCalls(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("calls", "Prints the calls on ivr-calls as JSON lines (protojson), following new ones.\nBy default it starts with the calls of the last --since.")
	var k kafkaFlags
	k.register(fs, defaultBrokers)
	fromBeginning := fs.Bool("from-beginning", false, "start at the oldest call kept")
	since := fs.Duration("since", time.Minute, "start with the calls produced this long ago")
	limit := fs.Int("limit", 0, "exit after this many calls; 0 follows until interrupted")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *limit < 0 {
		return badFlag("limit", "%d; want a count >= 0", *limit)
	}
	if *since < 0 {
		return badFlag("since", "%v; want a duration >= 0 like 1m", *since)
	}
	cfg, err := k.kafka("ivrsched-calls")
	if err != nil {
		return err
	}
	topic := string(k.topics().Calls)
	client, err := cfg.Connect(ctx)
	if err != nil {
		return err
	}
	defer client.Close()
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	defer consumer.Close()
	parts, err := consumer.Partitions(topic)
	if err != nil {
		return fmt.Errorf("partitions of %s: %w", topic, err)
	}
	msgs := make(chan *sarama.ConsumerMessage)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	startMs := time.Now().Add(-*since).UnixMilli()
	for _, p := range parts {
		offset := sarama.OffsetOldest
		if !*fromBeginning {
			// The end first: when nothing is that recent, the calls are
			// followed from the end as it was before the lookup, so a call
			// produced meanwhile is not skipped (OffsetNewest would be
			// resolved later, after it).
			end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
			if err != nil {
				return fmt.Errorf("end offset of %s/%d: %w", topic, p, err)
			}
			if offset, err = client.GetOffset(topic, p, startMs); err != nil {
				return fmt.Errorf("offset of %s/%d at %v: %w", topic, p, time.UnixMilli(startMs), err)
			}
			if offset < 0 { // nothing that recent: follow from the end
				offset = end
			}
		}
		pc, err := consumer.ConsumePartition(topic, p, offset)
		if err != nil {
			return fmt.Errorf("consume %s/%d: %w", topic, p, err)
		}
		defer pc.Close()
		go func() {
			for m := range pc.Messages() {
				select {
				case msgs <- m:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	var c codec.IVRCall
	for n := 0; *limit == 0 || n < *limit; {
		select {
		case <-ctx.Done():
			return nil
		case m := <-msgs:
			v, _ := c.Decode(m.Value)
			call, ok := v.(*pb.IVRCall)
			if !ok {
				fmt.Fprintf(stdout, "{\"undecodable\":true,\"partition\":%d,\"offset\":%d}\n", m.Partition, m.Offset)
				continue
			}
			fmt.Fprintln(stdout, codec.JSON(call))
			n++
		}
	}
	return nil
}
