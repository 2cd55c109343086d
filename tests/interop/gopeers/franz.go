package main

import (
	"context"
	"fmt"
	"os"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func franzCodec(name string) kgo.CompressionCodec {
	switch name {
	case "none":
		return kgo.NoCompression()
	case "gzip":
		return kgo.GzipCompression()
	case "snappy":
		return kgo.SnappyCompression()
	case "lz4":
		return kgo.Lz4Compression()
	case "zstd":
		return kgo.ZstdCompression()
	}
	fail("bad codec %q", name)
	return kgo.NoCompression()
}

func franzAcks(acks string) kgo.Acks {
	switch acks {
	case "1":
		return kgo.LeaderAck()
	case "0":
		return kgo.NoAck()
	}
	return kgo.AllISRAcks()
}

func toKgo(topic string, r Record) *kgo.Record {
	rec := &kgo.Record{Topic: topic, Key: []byte(r.Key), Value: []byte(r.Value)}
	for _, h := range r.Headers {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h[0], Value: []byte(h[1])})
	}
	return rec
}

func fromKgo(rec *kgo.Record) Record {
	r := Record{
		Key: string(rec.Key), Value: string(rec.Value), Partition: rec.Partition,
		Offset: rec.Offset, Headers: [][2]string{},
	}
	for _, h := range rec.Headers {
		r.Headers = append(r.Headers, [2]string{h.Key, string(h.Value)})
	}
	return r
}

// franzProduce sends recs with one client and fills in their delivery reports.
func franzProduce(ctx context.Context, cl *kgo.Client, topic string, recs []Record) error {
	krs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		krs[i] = toKgo(topic, r)
	}
	if err := cl.ProduceSync(ctx, krs...).FirstErr(); err != nil {
		return err
	}
	for i, kr := range krs {
		recs[i].Partition = kr.Partition
		recs[i].Offset = kr.Offset
	}
	return nil
}

func franzRoundTrip(ctx context.Context, o *Options) (*Result, error) {
	res := &Result{Produced: []Record{}, Consumed: []Record{}, Committed: map[int32]int64{}}
	for i, round := range o.Rounds {
		opts := []kgo.Opt{
			kgo.SeedBrokers(o.Brokers...), kgo.ClientID("gopeers-franz"),
			kgo.ProducerBatchCompression(franzCodec(round.Codec)),
			kgo.RequiredAcks(franzAcks(round.Acks)),
		}
		// franz-go is idempotent unless told otherwise, which acks other than all need.
		if !o.Idempotent || round.Acks != "all" {
			opts = append(opts, kgo.DisableIdempotentWrite())
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return nil, err
		}
		recs := wanted(o, "franz-go", i)
		err = franzProduce(ctx, cl, o.Topic, recs)
		cl.Close()
		if err != nil {
			return nil, fmt.Errorf("round %d: %w", i, err)
		}
		if round.Acks == "0" {
			for j := range recs {
				recs[j].Offset = -1 // no answer: franz-go numbers a batch's records from 0
			}
		}
		res.Produced = append(res.Produced, recs...)
	}
	if !o.Consume {
		return res, nil
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(o.Brokers...), kgo.ClientID("gopeers-franz"),
		kgo.ConsumerGroup(o.Group), kgo.ConsumeTopics(o.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
	)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	for len(res.Consumed) < len(res.Produced) {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("read %d of %d: %w", len(res.Consumed), len(res.Produced), ctx.Err())
		}
		fetches.EachError(func(t string, p int32, err error) {
			fmt.Fprintf(os.Stderr, "fetch %s/%d: %v\n", t, p, err)
		})
		fetches.EachRecord(func(rec *kgo.Record) { res.Consumed = append(res.Consumed, fromKgo(rec)) })
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	offsets, err := kadm.NewClient(cl).FetchOffsets(ctx, o.Group)
	if err != nil {
		return nil, fmt.Errorf("fetch offsets: %w", err)
	}
	offsets.Each(func(r kadm.OffsetResponse) {
		if r.Topic == o.Topic && r.Err == nil {
			res.Committed[r.Partition] = r.At
		}
	})
	return res, nil
}

// franzTxn: committed, aborted and committed transactions of N records, then
// the partitions read with each isolation level.
func franzTxn(ctx context.Context, o *Options) (*Result, error) {
	res := &Result{Produced: []Record{}, Consumed: []Record{}, Committed: map[int32]int64{}}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(o.Brokers...), kgo.ClientID("gopeers-franz-txn"),
		kgo.TransactionalID(o.TxID), kgo.ProducerBatchCompression(franzCodec(o.Rounds[0].Codec)),
	)
	if err != nil {
		return nil, err
	}
	committed := 0
	for i, end := range []kgo.TransactionEndTry{kgo.TryCommit, kgo.TryAbort, kgo.TryCommit} {
		if err := cl.BeginTransaction(); err != nil {
			return nil, fmt.Errorf("begin %d: %w", i, err)
		}
		recs := wanted(o, "franz-go", i)
		if err := franzProduce(ctx, cl, o.Topic, recs); err != nil {
			return nil, fmt.Errorf("transaction %d: %w", i, err)
		}
		if err := cl.EndTransaction(ctx, end); err != nil {
			return nil, fmt.Errorf("end %d: %w", i, err)
		}
		word := "commit"
		if end == kgo.TryAbort {
			word = "abort"
		} else {
			committed += len(recs)
		}
		for j := range recs {
			recs[j].Txn = word
		}
		res.Produced = append(res.Produced, recs...)
	}
	cl.Close()

	parts := map[int32]kgo.Offset{}
	for p := 0; p < o.Partitions; p++ {
		parts[int32(p)] = kgo.NewOffset().AtStart()
	}
	read := func(level kgo.IsolationLevel, want int) ([]Record, error) {
		rd, err := kgo.NewClient(
			kgo.SeedBrokers(o.Brokers...), kgo.ClientID("gopeers-franz-read"),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{o.Topic: parts}),
			kgo.FetchIsolationLevel(level),
		)
		if err != nil {
			return nil, err
		}
		defer rd.Close()
		out := []Record{}
		for len(out) < want {
			fetches := rd.PollFetches(ctx)
			if ctx.Err() != nil {
				return nil, fmt.Errorf("read %d of %d: %w", len(out), want, ctx.Err())
			}
			fetches.EachRecord(func(rec *kgo.Record) { out = append(out, fromKgo(rec)) })
		}
		return out, nil
	}
	if res.Consumed, err = read(kgo.ReadCommitted(), committed); err != nil {
		return nil, fmt.Errorf("read_committed: %w", err)
	}
	if res.Uncommitted, err = read(kgo.ReadUncommitted(), len(res.Produced)); err != nil {
		return nil, fmt.Errorf("read_uncommitted: %w", err)
	}
	return res, nil
}
