package main

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/IBM/sarama"
)

func saramaConfig(o *Options) *sarama.Config {
	config := sarama.NewConfig()
	config.ClientID = "gopeers-sarama"
	if o.Version != "" {
		v, err := sarama.ParseKafkaVersion(o.Version)
		if err != nil {
			fail("bad -version: %v", err)
		}
		config.Version = v
	}
	return config
}

func saramaCodec(name string) sarama.CompressionCodec {
	switch name {
	case "none":
		return sarama.CompressionNone
	case "gzip":
		return sarama.CompressionGZIP
	case "snappy":
		return sarama.CompressionSnappy
	case "lz4":
		return sarama.CompressionLZ4
	case "zstd":
		return sarama.CompressionZSTD
	}
	fail("bad codec %q", name)
	return sarama.CompressionNone
}

// saramaProduce sends one round with a SyncProducer of its own; sarama's
// default partitioner hashes keys with FNV-1a (not Java's murmur2).
func saramaProduce(o *Options, round Round, recs []Record) error {
	config := saramaConfig(o)
	config.Producer.Return.Successes = true
	config.Producer.Compression = saramaCodec(round.Codec)
	switch round.Acks {
	case "all":
		config.Producer.RequiredAcks = sarama.WaitForAll
		if o.Idempotent {
			config.Producer.Idempotent = true
			config.Net.MaxOpenRequests = 1
		}
	case "1":
		config.Producer.RequiredAcks = sarama.WaitForLocal
	case "0":
		config.Producer.RequiredAcks = sarama.NoResponse
	}
	producer, err := sarama.NewSyncProducer(o.Brokers, config)
	if err != nil {
		return err
	}
	msgs := make([]*sarama.ProducerMessage, len(recs))
	for i, r := range recs {
		msgs[i] = &sarama.ProducerMessage{
			Topic: o.Topic, Key: sarama.StringEncoder(r.Key), Value: sarama.StringEncoder(r.Value),
		}
		if !config.Version.IsAtLeast(sarama.V0_11_0_0) {
			recs[i].Headers = [][2]string{} // message sets before 0.11 have none
		}
		for _, h := range recs[i].Headers {
			msgs[i].Headers = append(msgs[i].Headers, sarama.RecordHeader{Key: []byte(h[0]), Value: []byte(h[1])})
		}
	}
	if err := producer.SendMessages(msgs); err != nil {
		producer.Close()
		if errs, ok := err.(sarama.ProducerErrors); ok && len(errs) > 0 {
			return fmt.Errorf("%w (the first: %v)", err, errs[0].Err)
		}
		return err
	}
	for i, m := range msgs {
		recs[i].Partition = m.Partition
		recs[i].Offset = m.Offset
		if round.Acks == "0" {
			recs[i].Offset = -1 // no answer: whatever sarama left there is no report
		}
	}
	return producer.Close()
}

type saramaHandler struct {
	want int
	mu   *sync.Mutex
	got  *[]Record
	done context.CancelFunc
}

func (h saramaHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h saramaHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h saramaHandler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for msg := range c.Messages() {
		r := Record{
			Key: string(msg.Key), Value: string(msg.Value), Partition: msg.Partition,
			Offset: msg.Offset, Headers: [][2]string{},
		}
		for _, h := range msg.Headers {
			r.Headers = append(r.Headers, [2]string{string(h.Key), string(h.Value)})
		}
		h.mu.Lock()
		*h.got = append(*h.got, r)
		s.MarkMessage(msg, "")
		done := len(*h.got) >= h.want
		h.mu.Unlock()
		if done {
			s.Commit()
			h.done()
			return nil
		}
	}
	return nil
}

func saramaRoundTrip(ctx context.Context, o *Options) (*Result, error) {
	res := &Result{Produced: []Record{}, Consumed: []Record{}, Committed: map[int32]int64{}}
	for i, round := range o.Rounds {
		recs := wanted(o, "sarama", i)
		if err := saramaProduce(o, round, recs); err != nil {
			return nil, fmt.Errorf("round %d: %w", i, err)
		}
		res.Produced = append(res.Produced, recs...)
	}
	if !o.Consume {
		return res, nil
	}
	config := saramaConfig(o)
	config.Consumer.Offsets.Initial = sarama.OffsetOldest
	config.Consumer.Offsets.AutoCommit.Enable = false
	config.Consumer.Return.Errors = true
	client, err := sarama.NewClient(o.Brokers, config)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	cg, err := sarama.NewConsumerGroupFromClient(o.Group, client)
	if err != nil {
		return nil, err
	}
	go func() {
		for err := range cg.Errors() {
			fmt.Fprintf(os.Stderr, "consumer error: %v\n", err)
		}
	}()
	readCtx, done := context.WithCancel(ctx)
	defer done()
	h := saramaHandler{want: len(res.Produced), mu: &sync.Mutex{}, got: &res.Consumed, done: done}
	for readCtx.Err() == nil {
		if err := cg.Consume(readCtx, []string{o.Topic}, h); err != nil {
			return nil, fmt.Errorf("consume: %w", err)
		}
	}
	if err := cg.Close(); err != nil {
		return nil, fmt.Errorf("close: %w", err)
	}
	if len(res.Consumed) < len(res.Produced) {
		return nil, fmt.Errorf("read %d of %d: %w", len(res.Consumed), len(res.Produced), ctx.Err())
	}
	partitions, err := client.Partitions(o.Topic)
	if err != nil {
		return nil, err
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return nil, err
	}
	offsets, err := admin.ListConsumerGroupOffsets(o.Group, map[string][]int32{o.Topic: partitions})
	if err != nil {
		return nil, fmt.Errorf("committed offsets: %w", err)
	}
	for _, p := range partitions {
		if b := offsets.GetBlock(o.Topic, p); b != nil && b.Offset >= 0 {
			res.Committed[p] = b.Offset
		}
	}
	return res, nil
}
