// gopeers: the current Go Kafka clients (franz-go, IBM/sarama, segmentio/kafka-go,
// from the Go module proxy) as peers of trafka's tests (issue #60). The Python
// tests run it and check what it prints against what the broker holds.
//
//	gopeers -client franz-go|sarama|kafka-go -mode roundtrip -brokers H:P -topic T -group G -n N
//	        [-rounds codec:acks,...] [-idempotent] [-version V] [-prefix P]
//	    Produces N keyed records (headers "n" and "client") per round, each round
//	    with its own producer (compression codec, acks all|1|0), then reads every
//	    one back as the only member of group G, commits, and reads the group's
//	    committed offsets.
//	gopeers -client franz-go|sarama -mode txn -brokers H:P -topic T -partitions P -n N -txid ID
//	        [-group G]
//	    Three transactions of N records: committed, aborted, committed; then reads
//	    the partitions read_committed (expects 2N) and read_uncommitted (3N).
//	    sarama's also commit offsets of group G in each (AddOffsetsToTxn:
//	    {0: 10}, {0: 20, 1: 20} aborted, {1: 30}), "committed" then being the
//	    group's offsets read with RequireStable.
//	gopeers -client C -mode produce ...  (roundtrip without the reading)
//
// One JSON object on stdout: {"produced": [...], "consumed": [...], "committed":
// {...}, "uncommitted": [...]}. Records: key, value, headers, partition, offset
// (a delivery report's offset; -1 when the client was told none) and round.
// Errors go to stderr with exit status 1. A deadline (-timeout) bounds it all.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

// Record is one record as written (its delivery report) or as read.
type Record struct {
	Round     int         `json:"round"`
	Key       string      `json:"key"`
	Value     string      `json:"value"`
	Headers   [][2]string `json:"headers"`
	Partition int32       `json:"partition"`
	Offset    int64       `json:"offset"`
	Txn       string      `json:"txn,omitempty"`
}

// Result is what the run prints.
type Result struct {
	Client      string          `json:"client"`
	Produced    []Record        `json:"produced"`
	Consumed    []Record        `json:"consumed"`
	Uncommitted []Record        `json:"uncommitted,omitempty"`
	Committed   map[int32]int64 `json:"committed"`
}

// Round is one producer's settings.
type Round struct {
	Codec string
	Acks  string
}

// Options are the command line's.
type Options struct {
	Brokers    []string
	Topic      string
	Group      string
	Partitions int
	N          int
	Prefix     string
	Rounds     []Round
	Idempotent bool
	Version    string
	TxID       string
	Consume    bool
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

// wanted is the records a round writes: keys repeat (13 of them), so each
// client's partitioner places several records per key.
func wanted(o *Options, client string, round int) []Record {
	out := make([]Record, o.N)
	for i := range out {
		out[i] = Record{
			Round:   round,
			Key:     fmt.Sprintf("key-%d", i%13),
			Value:   fmt.Sprintf("%s-%d-%d", o.Prefix, round, i),
			Headers: [][2]string{{"n", fmt.Sprint(i)}, {"client", client}},
			Offset:  -1,
		}
	}
	return out
}

func parseRounds(s string) []Round {
	var out []Round
	for _, part := range strings.Split(s, ",") {
		codec, acks, ok := strings.Cut(part, ":")
		if !ok {
			fail("bad -rounds part %q (codec:acks)", part)
		}
		switch acks {
		case "all", "1", "0":
		default:
			fail("bad acks %q (all, 1 or 0)", acks)
		}
		out = append(out, Round{codec, acks})
	}
	return out
}

func main() {
	client := flag.String("client", "", "franz-go, sarama or kafka-go")
	mode := flag.String("mode", "roundtrip", "roundtrip, produce or txn")
	brokers := flag.String("brokers", "", "host:port[,host:port]")
	topic := flag.String("topic", "", "the topic (made beforehand)")
	group := flag.String("group", "", "the consumer group (roundtrip)")
	partitions := flag.Int("partitions", 1, "the topic's partitions (txn)")
	n := flag.Int("n", 10, "records per round")
	prefix := flag.String("prefix", "v", "value prefix")
	rounds := flag.String("rounds", "none:all", "codec:acks per producer, comma-separated")
	idempotent := flag.Bool("idempotent", false, "idempotent producers (acks=all rounds)")
	version := flag.String("version", "", "sarama: the Kafka version it speaks (default its own)")
	txid := flag.String("txid", "", "txn: the transactional id")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long")
	flag.Parse()

	o := &Options{
		Brokers: strings.Split(*brokers, ","), Topic: *topic, Group: *group,
		Partitions: *partitions, N: *n, Prefix: *prefix, Rounds: parseRounds(*rounds),
		Idempotent: *idempotent, Version: *version, TxID: *txid, Consume: *mode == "roundtrip",
	}
	if *topic == "" || *brokers == "" {
		fail("-brokers and -topic are needed")
	}
	if o.Consume && o.Group == "" {
		fail("-group is needed to read back")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	go func() {
		<-ctx.Done()
		time.Sleep(5 * time.Second) // a client ignoring its context must not hang the test
		fail("deadline of %s passed", *timeout)
	}()

	var res *Result
	var err error
	switch {
	case *mode == "txn" && *client == "franz-go":
		res, err = franzTxn(ctx, o)
	case *mode == "txn" && *client == "sarama":
		if o.Group == "" {
			fail("-group is needed for sarama's transactions")
		}
		res, err = saramaTxn(ctx, o)
	case *mode == "txn":
		fail("-mode txn is franz-go's and sarama's")
	case *mode != "roundtrip" && *mode != "produce":
		fail("bad -mode %q", *mode)
	case *client == "franz-go":
		res, err = franzRoundTrip(ctx, o)
	case *client == "sarama":
		res, err = saramaRoundTrip(ctx, o)
	case *client == "kafka-go":
		res, err = kafkaGoRoundTrip(ctx, o)
	default:
		fail("bad -client %q", *client)
	}
	if err != nil {
		fail("%s: %v", *client, err)
	}
	res.Client = *client
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fail("json: %v", err)
	}
}
