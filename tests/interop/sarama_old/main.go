// A sarama 1.22 client (Debian's golang-github-shopify-sarama-dev) for trafka's
// interop tests (issue #37): it produces or consumes as a group member at an old
// protocol version. Built by tests/brokerlite/test_interop_sarama_old.py in GOPATH
// mode; the build output never lands in the repository.
//
//	sarama_old -mode produce -brokers H:P -topic T -n N -prefix P [-version V] [-compression C] [-idempotent]
//	    prints "offset" per message, in order (every message to partition 0, keys k0, k1...)
//	sarama_old -mode consume -brokers H:P -topic T -group G -n N [-version V]
//	    prints "offset key=value" per message, marks each, exits after N (commits on close)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/Shopify/sarama"
)

type handler struct {
	want   int
	mu     *sync.Mutex
	got    *int
	cancel context.CancelFunc
}

func (h handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h handler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for msg := range c.Messages() {
		h.mu.Lock()
		if *h.got < h.want {
			fmt.Printf("%d %s=%s\n", msg.Offset, msg.Key, msg.Value)
			s.MarkMessage(msg, "")
			*h.got++
		}
		done := *h.got >= h.want
		h.mu.Unlock()
		if done {
			h.cancel()
			return nil
		}
	}
	return nil
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func main() {
	mode := flag.String("mode", "", "produce or consume")
	brokers := flag.String("brokers", "", "host:port[,host:port]")
	topic := flag.String("topic", "", "the topic")
	group := flag.String("group", "", "the consumer group (consume)")
	n := flag.Int("n", 0, "how many messages")
	prefix := flag.String("prefix", "m", "value prefix (produce)")
	version := flag.String("version", "", "Kafka version to speak (default: sarama's, 0.8.2)")
	compression := flag.String("compression", "none", "none, gzip, snappy or lz4 (produce)")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long")
	idempotent := flag.Bool("idempotent", false, "an idempotent producer (needs -version 0.11.0.0 or newer)")
	flag.Parse()

	config := sarama.NewConfig()
	config.ClientID = "sarama-old"
	if *version != "" {
		v, err := sarama.ParseKafkaVersion(*version)
		if err != nil {
			fail("bad -version: %v", err)
		}
		config.Version = v
	}
	addrs := strings.Split(*brokers, ",")
	switch *mode {
	case "produce":
		config.Producer.Return.Successes = true
		config.Producer.RequiredAcks = sarama.WaitForAll
		config.Producer.Partitioner = sarama.NewManualPartitioner
		if *idempotent {
			config.Producer.Idempotent = true
			config.Net.MaxOpenRequests = 1
		}
		switch *compression {
		case "none":
		case "gzip":
			config.Producer.Compression = sarama.CompressionGZIP
		case "snappy":
			config.Producer.Compression = sarama.CompressionSnappy
		case "lz4":
			config.Producer.Compression = sarama.CompressionLZ4
		default:
			fail("bad -compression %q", *compression)
		}
		producer, err := sarama.NewSyncProducer(addrs, config)
		if err != nil {
			fail("producer: %v", err)
		}
		msgs := make([]*sarama.ProducerMessage, *n)
		for i := range msgs {
			msgs[i] = &sarama.ProducerMessage{
				Topic: *topic,
				Key:   sarama.StringEncoder(fmt.Sprintf("k%d", i)),
				Value: sarama.StringEncoder(fmt.Sprintf("%s-%d", *prefix, i)),
			}
		}
		if err := producer.SendMessages(msgs); err != nil {
			fail("send: %v", err)
		}
		for _, m := range msgs {
			fmt.Println(m.Offset)
		}
		if err := producer.Close(); err != nil {
			fail("close: %v", err)
		}
	case "consume":
		config.Consumer.Offsets.Initial = sarama.OffsetOldest
		config.Consumer.Return.Errors = true
		cg, err := sarama.NewConsumerGroup(addrs, *group, config)
		if err != nil {
			fail("consumer group: %v", err)
		}
		go func() {
			for err := range cg.Errors() {
				fmt.Fprintf(os.Stderr, "consumer error: %v\n", err)
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		got := 0
		h := handler{want: *n, mu: &sync.Mutex{}, got: &got, cancel: cancel}
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{*topic}, h); err != nil {
				fail("consume: %v", err)
			}
		}
		if err := cg.Close(); err != nil {
			fail("close: %v", err)
		}
		if got < *n {
			fail("timed out with %d of %d messages", got, *n)
		}
	default:
		fail("-mode must be produce or consume")
	}
}
