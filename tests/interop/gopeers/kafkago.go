package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

func kafkaGoCodec(name string) kafka.Compression {
	switch name {
	case "none":
		return 0
	case "gzip":
		return kafka.Gzip
	case "snappy":
		return kafka.Snappy
	case "lz4":
		return kafka.Lz4
	case "zstd":
		return kafka.Zstd
	}
	fail("bad codec %q", name)
	return 0
}

// kafkaGoProduce sends one round with a Writer of its own, keys hashed by
// kafka-go's Hash balancer (FNV-1a, as sarama); kafka-go has no idempotent
// producer. The Writer's completion callback is the delivery report.
func kafkaGoProduce(ctx context.Context, o *Options, round Round, recs []Record) error {
	acks := kafka.RequireAll
	switch round.Acks {
	case "1":
		acks = kafka.RequireOne
	case "0":
		acks = kafka.RequireNone
	}
	var mu sync.Mutex
	reports := map[string]kafka.Message{}
	w := &kafka.Writer{
		Addr: kafka.TCP(o.Brokers...), Topic: o.Topic, Balancer: &kafka.Hash{},
		RequiredAcks: acks, Compression: kafkaGoCodec(round.Codec),
		BatchTimeout: 5 * time.Millisecond,
		Completion: func(msgs []kafka.Message, err error) {
			if err != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				reports[string(m.Value)] = m
			}
		},
	}
	msgs := make([]kafka.Message, len(recs))
	for i, r := range recs {
		msgs[i] = kafka.Message{Key: []byte(r.Key), Value: []byte(r.Value)}
		for _, h := range r.Headers {
			msgs[i].Headers = append(msgs[i].Headers, kafka.Header{Key: h[0], Value: []byte(h[1])})
		}
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		w.Close()
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range recs {
		m, ok := reports[recs[i].Value]
		if !ok {
			return fmt.Errorf("no delivery report for %s", recs[i].Value)
		}
		recs[i].Partition = int32(m.Partition)
		recs[i].Offset = m.Offset
		if round.Acks == "0" {
			// No answer: kafka-go fills in neither partition nor offset then.
			recs[i].Partition, recs[i].Offset = -1, -1
		}
	}
	return nil
}

func kafkaGoRoundTrip(ctx context.Context, o *Options) (*Result, error) {
	res := &Result{Produced: []Record{}, Consumed: []Record{}, Committed: map[int32]int64{}}
	for i, round := range o.Rounds {
		if o.Idempotent {
			return nil, fmt.Errorf("kafka-go has no idempotent producer")
		}
		recs := wanted(o, "kafka-go", i)
		if err := kafkaGoProduce(ctx, o, round, recs); err != nil {
			return nil, fmt.Errorf("round %d: %w", i, err)
		}
		res.Produced = append(res.Produced, recs...)
	}
	if !o.Consume {
		return res, nil
	}
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: o.Brokers, GroupID: o.Group, Topic: o.Topic,
		StartOffset: kafka.FirstOffset, MaxWait: 500 * time.Millisecond,
	})
	for len(res.Consumed) < len(res.Produced) {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("read %d of %d: %w", len(res.Consumed), len(res.Produced), err)
		}
		rec := Record{
			Key: string(m.Key), Value: string(m.Value), Partition: int32(m.Partition),
			Offset: m.Offset, Headers: [][2]string{},
		}
		for _, h := range m.Headers {
			rec.Headers = append(rec.Headers, [2]string{h.Key, string(h.Value)})
		}
		res.Consumed = append(res.Consumed, rec)
		if err := r.CommitMessages(ctx, m); err != nil {
			r.Close()
			return nil, fmt.Errorf("commit: %w", err)
		}
	}
	if err := r.Close(); err != nil {
		return nil, fmt.Errorf("close: %w", err)
	}
	client := &kafka.Client{Addr: kafka.TCP(o.Brokers...), Timeout: 10 * time.Second}
	meta, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{o.Topic}})
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	var parts []int
	for _, t := range meta.Topics {
		for _, p := range t.Partitions {
			parts = append(parts, p.ID)
		}
	}
	offsets, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{
		GroupID: o.Group, Topics: map[string][]int{o.Topic: parts},
	})
	if err != nil {
		return nil, fmt.Errorf("committed offsets: %w", err)
	}
	for _, p := range offsets.Topics[o.Topic] {
		if p.Error == nil && p.CommittedOffset >= 0 {
			res.Committed[int32(p.Partition)] = p.CommittedOffset
		}
	}
	return res, nil
}
