package main

import (
	"context"
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// saramaTxnOffsets are the group offsets each transaction sends with
// AddOffsetsToTxn (TxnOffsetCommit): the aborted one's must never be read.
var saramaTxnOffsets = []map[int32]int64{{0: 10}, {0: 20, 1: 20}, {1: 30}}

// saramaTxn: committed, aborted and committed transactions of N records with
// sarama's transactional SyncProducer, each also committing group offsets in
// the transaction (AddOffsetsToTxn); then the partitions read with each
// isolation level, and the group's offsets read stable (OffsetFetch v7+ with
// RequireStable, retried while the coordinator answers UNSTABLE_OFFSET_COMMIT).
func saramaTxn(ctx context.Context, o *Options) (*Result, error) {
	res := &Result{Produced: []Record{}, Consumed: []Record{}, Committed: map[int32]int64{}}
	config := saramaConfig(o)
	config.ClientID = "gopeers-sarama-txn"
	config.Producer.Return.Successes = true
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Idempotent = true
	config.Producer.Transaction.ID = o.TxID
	config.Net.MaxOpenRequests = 1
	config.Producer.Compression = saramaCodec(o.Rounds[0].Codec)
	// Java's producer's request timeout and more retries than sarama's 10 s and
	// 3: on a loaded machine a fresh RF 3 topic's acks=all Produce can take
	// longer (REQUEST_TIMED_OUT), which a retry within the transaction survives.
	config.Producer.Timeout = 30 * time.Second
	config.Producer.Retry.Max = 10
	config.Producer.Retry.Backoff = 250 * time.Millisecond
	producer, err := sarama.NewSyncProducer(o.Brokers, config)
	if err != nil {
		return nil, err
	}
	committed := 0
	for i, word := range []string{"commit", "abort", "commit"} {
		if err := producer.BeginTxn(); err != nil {
			return nil, fmt.Errorf("begin %d: %w", i, err)
		}
		recs := wanted(o, "sarama", i)
		msgs := make([]*sarama.ProducerMessage, len(recs))
		for j, r := range recs {
			msgs[j] = &sarama.ProducerMessage{
				Topic: o.Topic, Key: sarama.StringEncoder(r.Key), Value: sarama.StringEncoder(r.Value),
			}
			for _, h := range r.Headers {
				msgs[j].Headers = append(msgs[j].Headers, sarama.RecordHeader{Key: []byte(h[0]), Value: []byte(h[1])})
			}
		}
		if err := producer.SendMessages(msgs); err != nil {
			if errs, ok := err.(sarama.ProducerErrors); ok && len(errs) > 0 {
				return nil, fmt.Errorf("transaction %d: %w (the first: %v)", i, err, errs[0].Err)
			}
			return nil, fmt.Errorf("transaction %d: %w", i, err)
		}
		offsets := []*sarama.PartitionOffsetMetadata{}
		for p, at := range saramaTxnOffsets[i] {
			offsets = append(offsets, &sarama.PartitionOffsetMetadata{Partition: p, Offset: at, LeaderEpoch: -1})
		}
		if err := producer.AddOffsetsToTxn(map[string][]*sarama.PartitionOffsetMetadata{o.Topic: offsets}, o.Group); err != nil {
			return nil, fmt.Errorf("offsets %d: %w", i, err)
		}
		end := producer.CommitTxn
		if word == "abort" {
			end = producer.AbortTxn
		} else {
			committed += len(recs)
		}
		if err := end(); err != nil {
			return nil, fmt.Errorf("%s %d: %w", word, i, err)
		}
		for j, m := range msgs {
			recs[j].Partition, recs[j].Offset, recs[j].Txn = m.Partition, m.Offset, word
		}
		res.Produced = append(res.Produced, recs...)
	}
	if err := producer.Close(); err != nil {
		return nil, err
	}
	if res.Consumed, err = saramaRead(ctx, o, sarama.ReadCommitted, committed); err != nil {
		return nil, fmt.Errorf("read_committed: %w", err)
	}
	if res.Uncommitted, err = saramaRead(ctx, o, sarama.ReadUncommitted, len(res.Produced)); err != nil {
		return nil, fmt.Errorf("read_uncommitted: %w", err)
	}
	if res.Committed, err = saramaStableOffsets(ctx, o); err != nil {
		return nil, fmt.Errorf("group offsets: %w", err)
	}
	return res, nil
}

// saramaRead reads every partition from its start with a partition consumer
// each until want records came.
func saramaRead(ctx context.Context, o *Options, level sarama.IsolationLevel, want int) ([]Record, error) {
	config := saramaConfig(o)
	config.Consumer.IsolationLevel = level
	consumer, err := sarama.NewConsumer(o.Brokers, config)
	if err != nil {
		return nil, err
	}
	defer consumer.Close()
	messages := make(chan *sarama.ConsumerMessage)
	for p := 0; p < o.Partitions; p++ {
		pc, err := consumer.ConsumePartition(o.Topic, int32(p), sarama.OffsetOldest)
		if err != nil {
			return nil, err
		}
		defer pc.AsyncClose()
		go func() {
			for m := range pc.Messages() {
				select {
				case messages <- m:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	out := []Record{}
	for len(out) < want {
		select {
		case m := <-messages:
			r := Record{Key: string(m.Key), Value: string(m.Value), Partition: m.Partition, Offset: m.Offset, Headers: [][2]string{}}
			for _, h := range m.Headers {
				r.Headers = append(r.Headers, [2]string{string(h.Key), string(h.Value)})
			}
			out = append(out, r)
		case <-ctx.Done():
			return nil, fmt.Errorf("read %d of %d: %w", len(out), want, ctx.Err())
		}
	}
	return out, nil
}

// saramaStableOffsets: the group's committed offsets of the topic's partitions
// (-1 left out), asked with RequireStable so no transaction is pending.
func saramaStableOffsets(ctx context.Context, o *Options) (map[int32]int64, error) {
	client, err := sarama.NewClient(o.Brokers, saramaConfig(o))
	if err != nil {
		return nil, err
	}
	defer client.Close()
	parts := []int32{}
	for p := 0; p < o.Partitions; p++ {
		parts = append(parts, int32(p))
	}
	for ctx.Err() == nil {
		coordinator, err := client.Coordinator(o.Group)
		if err != nil {
			return nil, err
		}
		request := sarama.NewOffsetFetchRequest(client.Config().Version, o.Group, map[string][]int32{o.Topic: parts})
		if request.Version < 7 {
			return nil, fmt.Errorf("OffsetFetch v%d has no RequireStable", request.Version)
		}
		request.RequireStable = true
		answer, err := coordinator.FetchOffset(request)
		if err != nil {
			return nil, err
		}
		switch answer.Err {
		case sarama.ErrNoError:
		case sarama.ErrOffsetsLoadInProgress, sarama.ErrNotCoordinatorForConsumer:
			_ = client.RefreshCoordinator(o.Group)
			time.Sleep(100 * time.Millisecond)
			continue
		default:
			return nil, answer.Err
		}
		out, unstable := map[int32]int64{}, false
		for _, p := range parts {
			block := answer.GetBlock(o.Topic, p)
			switch {
			case block == nil:
				return nil, fmt.Errorf("no answer for partition %d", p)
			case block.Err == sarama.ErrUnstableOffsetCommit:
				unstable = true
			case block.Err != sarama.ErrNoError:
				return nil, fmt.Errorf("partition %d: %w", p, block.Err)
			case block.Offset >= 0:
				out[p] = block.Offset
			}
		}
		if !unstable {
			return out, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, ctx.Err()
}
