'use strict';
/*
 * Drive RocketMQ's official Node.js client (rocketmq-client-nodejs, pinned in
 * package.json next to this file) from a test: the Node twin of ../rmq_agent.py.
 *
 * Reads one JSON command per line on stdin, runs them one at a time, and writes
 * one JSON answer per line on stdout: {"ok": true, "result": ...} or
 * {"ok": false, "error": "Type: text"}. The client logs to
 * $HOME/logs/rocketmq/rocketmq_client_nodejs.log (written synchronously, so the
 * tail is complete when a test shows it).
 *
 * Commands (op and its fields):
 *
 *   producer   name, endpoints, topics, checker ("commit" | "rollback" | null), ak, sk,
 *              startup_s (how long startup() may take; default 20)
 *   send       producer, topic, body, tag, keys, props, group, delivery_ms, transaction
 *              ("commit" | "rollback" | "open"; absent = not transactional)
 *   simple     name, endpoints, group, topic (or topics: a list), expr (for each topic),
 *              sql (true: expr is SQL92), await_s, ak, sk, startup_s
 *   receive    consumer, max, invisible_s -> [message]
 *   ack        consumer, message_id          (of the last receive that had it)
 *   change     consumer, message_id, invisible_s -> new receipt handle
 *   push       name, endpoints, group, topic (or topics), expr, sql, behaviour ("success" |
 *              "fail" | "fail_once"), startup_s
 *   consumed   name -> [message] consumed so far, in consumption order
 *   shutdown   name
 *   exit
 *
 * A message is {"body", "topic", "tag", "keys", "props", "message_id", "handle",
 * "attempt", "group", "delivery_ms", "corrupted", "received_ms"}.
 */

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const readline = require('node:readline');
const util = require('node:util');
const {
  ConsumeResult,
  FilterExpression,
  Producer,
  PushConsumer,
  SimpleConsumer,
} = require('rocketmq-client-nodejs');
const { FilterType, TransactionResolution } =
  require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');

const LOG = path.join(os.homedir(), 'logs', 'rocketmq', 'rocketmq_client_nodejs.log');
fs.mkdirSync(path.dirname(LOG), { recursive: true });

function line(level, args) {
  fs.appendFileSync(LOG, `${new Date().toISOString()} ${level} ${util.format(...args)}\n`);
}

const logger = {
  info: (...args) => line('INFO', args),
  warn: (...args) => line('WARN', args),
  error: (...args) => line('ERROR', args),
  debug: (...args) => line('DEBUG', args),
};

const clients = new Map();
const received = new Map();        // `${consumer}/${message id}` -> MessageView
const consumed = new Map();        // push consumer name -> [message]

function options(cmd) {
  const out = { endpoints: cmd.endpoints, namespace: '', logger, requestTimeout: 3000 };
  if (cmd.ak) {
    out.sessionCredentials = { accessKey: cmd.ak, accessSecret: cmd.sk || '' };
  }
  return out;
}

function view(msg) {
  return {
    body: msg.body.toString('utf8'),
    topic: msg.topic,
    tag: msg.tag || null,
    keys: [ ...msg.keys ].sort(),
    props: Object.fromEntries(msg.properties),
    message_id: msg.messageId,
    handle: msg.receiptHandle,
    attempt: msg.deliveryAttempt,
    group: msg.messageGroup || null,
    delivery_ms: msg.deliveryTimestamp ? msg.deliveryTimestamp.getTime() : null,
    corrupted: Boolean(msg.corrupted),
    received_ms: Date.now(),
  };
}

function subscriptions(cmd) {
  const filter = new FilterExpression(cmd.expr || '*', cmd.sql ? FilterType.SQL : FilterType.TAG);
  return new Map((cmd.topics || [ cmd.topic ]).map(topic => [ topic, filter ]));
}

async function start(client, cmd) {
  // startup() of 1.0.8 waits for a settings command with no deadline of its own
  const seconds = cmd.startup_s || 20;
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(
      `startup() did not finish within ${seconds} s (see the client log)`)), seconds * 1000);
  });
  try {
    await Promise.race([ client.startup(), deadline ]);
  } finally {
    clearTimeout(timer);
  }
  clients.set(cmd.name, client);
}

function checker(answer) {
  return {
    async check() {
      return answer === 'commit' ? TransactionResolution.COMMIT : TransactionResolution.ROLLBACK;
    },
  };
}

function listener(name, behaviour) {
  const seen = new Set();
  consumed.set(name, []);
  return {
    async consume(msg) {
      consumed.get(name).push(view(msg));
      const failed = behaviour === 'fail' || (behaviour === 'fail_once' && !seen.has(msg.messageId));
      seen.add(msg.messageId);
      return failed ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
    },
  };
}

async function send(cmd) {
  const producer = clients.get(cmd.producer);
  const message = { topic: cmd.topic, body: Buffer.from(cmd.body, 'utf8') };
  if (cmd.tag) message.tag = cmd.tag;
  if (cmd.keys) message.keys = cmd.keys;
  if (cmd.props) message.properties = new Map(Object.entries(cmd.props));
  if (cmd.group) message.messageGroup = cmd.group;
  if (cmd.delivery_ms) message.deliveryTimestamp = new Date(cmd.delivery_ms);
  const transaction = cmd.transaction ? producer.beginTransaction() : undefined;
  const receipt = await producer.send(message, transaction);
  if (cmd.transaction === 'commit') await transaction.commit();
  if (cmd.transaction === 'rollback') await transaction.rollback();
  return { message_id: receipt.messageId, transaction_id: receipt.transactionId || null,
    offset: receipt.offset };
}

const ops = {
  async producer(cmd) {
    const producer = new Producer({ ...options(cmd), topics: cmd.topics || undefined,
      checker: cmd.checker ? checker(cmd.checker) : undefined });
    await start(producer, cmd);
  },
  send,
  async simple(cmd) {
    const consumer = new SimpleConsumer({ ...options(cmd), consumerGroup: cmd.group,
      subscriptions: subscriptions(cmd),
      awaitDuration: (cmd.await_s || 3) * 1000 });
    await start(consumer, cmd);
  },
  async receive(cmd) {
    const messages = await clients.get(cmd.consumer).receive(cmd.max || 16,
      (cmd.invisible_s || 15) * 1000);
    for (const msg of messages) received.set(`${cmd.consumer}/${msg.messageId}`, msg);
    return messages.map(view);
  },
  async ack(cmd) {
    await clients.get(cmd.consumer).ack(received.get(`${cmd.consumer}/${cmd.message_id}`));
  },
  async change(cmd) {
    const msg = received.get(`${cmd.consumer}/${cmd.message_id}`);
    await clients.get(cmd.consumer).changeInvisibleDuration(msg, cmd.invisible_s * 1000);
    return msg.receiptHandle;
  },
  async push(cmd) {
    const consumer = new PushConsumer({ ...options(cmd), consumerGroup: cmd.group,
      subscriptions: subscriptions(cmd),
      messageListener: listener(cmd.name, cmd.behaviour || 'success') });
    await start(consumer, cmd);
  },
  async consumed(cmd) {
    return consumed.get(cmd.name) || [];
  },
  async shutdown(cmd) {
    const client = clients.get(cmd.name);
    clients.delete(cmd.name);
    await client.shutdown();
  },
};

function answer(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

async function main() {
  const input = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const text of input) {
    if (!text.trim()) continue;
    const cmd = JSON.parse(text);
    if (cmd.op === 'exit') break;
    try {
      if (!ops[cmd.op]) throw new TypeError(`unknown op ${JSON.stringify(cmd.op)}`);
      const result = await ops[cmd.op](cmd);
      answer({ ok: true, result: result === undefined ? null : result });
    } catch (err) {
      logger.error('op %s failed: %s', cmd.op, err && err.stack);
      answer({ ok: false, error: `${err && err.name}: ${err && err.message}` });
    }
  }
  // shut down what started (a client whose startup hung is not in `clients`); a push
  // consumer waits for its long polls, so the wait is bounded
  const down = Promise.allSettled([ ...clients.values() ].map(c => c.shutdown()));
  await Promise.race([ down, new Promise(resolve => setTimeout(resolve, 2000)) ]);
  answer({ ok: true, result: 'bye' });
  process.exit(0);
}

main().catch(err => {
  logger.error('agent failed: %s', err && err.stack);
  process.exit(1);
});
