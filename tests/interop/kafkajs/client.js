// A kafkajs client for trafka's interop tests (npm's kafkajs, installed by the
// tests' `kafkajs` fixture; nothing of it lands in the repository).
//
//   node client.js produce BROKERS TOPIC N PREFIX [idempotent|plain] [reports]
//       sends N keyed messages (keys k0..k{N-1}), every one to partition 0, 100
//       a send; with "reports", prints "PARTITION BASE_OFFSET" per send's answer;
//       then prints "ok N"
//   node client.js consume BROKERS TOPIC GROUP N
//       consumes N messages as a member of GROUP, commits, prints "KEY=VALUE" each
const { Kafka, logLevel } = require("kafkajs");

async function main() {
  const [mode, brokers, topic, ...rest] = process.argv.slice(2);
  const kafka = new Kafka({
    clientId: "trafka-kafkajs",
    brokers: brokers.split(","),
    logLevel: logLevel.ERROR,
    retry: { retries: 20, initialRetryTime: 100 },
  });
  if (mode === "produce") {
    const [n, prefix, idempotent] = [Number(rest[0]), rest[1], rest[2] === "idempotent"];
    const producer = kafka.producer(
      idempotent ? { idempotent: true, maxInFlightRequests: 1 } : {}
    );
    await producer.connect();
    const messages = [];
    for (let i = 0; i < n; i++) {
      messages.push({ key: `k${i}`, value: `${prefix}-${i}`, partition: 0 });
    }
    for (let i = 0; i < messages.length; i += 100) {
      const sent = await producer.send({ topic, acks: -1, messages: messages.slice(i, i + 100) });
      if (rest.includes("reports")) {
        for (const r of sent) console.log(`${r.partition} ${r.baseOffset}`);
      }
    }
    await producer.disconnect();
    console.log(`ok ${n}`);
  } else if (mode === "consume") {
    const [group, n] = [rest[0], Number(rest[1])];
    // A fetch finding nothing new is held 500 ms, not kafkajs' 5 s: the
    // disconnect once all N are read waits for the fetch in flight.
    const consumer = kafka.consumer({ groupId: group, maxWaitTimeInMs: 500 });
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    let seen = 0;
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`only ${seen} of ${n} messages`)), 60000);
      consumer.run({
        eachMessage: async ({ message }) => {
          console.log(`${message.key}=${message.value}`);
          seen += 1;
          if (seen >= n) {
            clearTimeout(timer);
            resolve();
          }
        },
      });
    });
    await consumer.disconnect();
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
}

main().catch((err) => {
  console.error(err.stack || String(err));
  process.exit(1);
});
