// A segmentio/kafka-go 0.2.1 client (Debian's golang-github-segmentio-kafka-go-dev)
// for trafka's interop tests (issue #37). kafka-go 0.2.1 speaks fixed versions:
// Produce v2 and Fetch v2 (magic 1 message sets), ListOffsets v1, Metadata v1,
// JoinGroup v1, OffsetCommit v2. Built by tests/brokerlite/test_interop_kafka_go_old.py
// in GOPATH mode; the build output never lands in the repository.
//
//	kafka_go_old -mode produce -broker H:P -topic T -n N -prefix P [-compression gzip]
//	    writes N messages to partition 0 of T through its leader
//	kafka_go_old -mode consume -broker H:P -topic T -group G -n N
//	    prints "offset key=value" per message, committing each (group reader)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	kafka "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/gzip"
)

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func main() {
	mode := flag.String("mode", "", "produce or consume")
	broker := flag.String("broker", "", "host:port")
	topic := flag.String("topic", "", "the topic")
	group := flag.String("group", "", "the consumer group (consume)")
	n := flag.Int("n", 0, "how many messages")
	prefix := flag.String("prefix", "m", "value prefix (produce)")
	compression := flag.String("compression", "none", "none or gzip (produce)")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	switch *mode {
	case "produce":
		conn, err := kafka.DialLeader(ctx, "tcp", *broker, *topic, 0)
		if err != nil {
			fail("dial leader: %v", err)
		}
		msgs := make([]kafka.Message, *n)
		for i := range msgs {
			msgs[i] = kafka.Message{
				Key:   []byte(fmt.Sprintf("k%d", i)),
				Value: []byte(fmt.Sprintf("%s-%d", *prefix, i)),
			}
		}
		conn.SetWriteDeadline(time.Now().Add(*timeout))
		if *compression == "gzip" {
			_, err = conn.WriteCompressedMessages(gzip.NewCompressionCodec(), msgs...)
		} else {
			_, err = conn.WriteMessages(msgs...)
		}
		if err != nil {
			fail("write: %v", err)
		}
		conn.Close()
	case "consume":
		r := kafka.NewReader(kafka.ReaderConfig{
			Brokers:        []string{*broker},
			GroupID:        *group,
			Topic:          *topic,
			MinBytes:       1,
			MaxBytes:       1 << 20,
			MaxWait:        200 * time.Millisecond,
			SessionTimeout: 10 * time.Second,
		})
		for i := 0; i < *n; i++ {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				fail("read after %d messages: %v", i, err)
			}
			fmt.Printf("%d %s=%s\n", m.Offset, m.Key, m.Value)
		}
		if err := r.Close(); err != nil {
			fail("close: %v", err)
		}
	default:
		fail("-mode must be produce or consume")
	}
}
