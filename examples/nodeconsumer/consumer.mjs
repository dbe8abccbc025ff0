// A consumer of outbox-relay in Node.js that needs nothing of the Go module: the signature is
// checked by the official Standard Webhooks library and CloudEvents are read by the official
// SDK. Run the relay with --signature-scheme standard-webhooks and, for CloudEvents,
// --format cloudevents (or --batch-max-events > 1 for batches).
//
//   npm ci && WEBHOOK_SECRET=whsec_... PORT=8080 node consumer.mjs
//
// It prints one JSON line per event it accepts the first time. A real consumer records the
// event id under a unique key in the same database transaction as the event's effect, and
// answers 2xx only after that commit; the Set below stands in for that table.
import http from "node:http";
import { Webhook } from "standardwebhooks";
import { HTTP } from "cloudevents";

const webhook = new Webhook(process.env.WEBHOOK_SECRET); // whsec_<base64>, as the relay's secret
const seen = new Set(); // stands in for a table with a unique key on the event id

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

// events returns what one request carries: one event (raw or CloudEvents binary mode) or a
// CloudEvents batch.
function events(headers, body) {
  const isCloudEvent = headers["ce-specversion"] !== undefined ||
    String(headers["content-type"] ?? "").startsWith("application/cloudevents");
  if (!isCloudEvent) {
    return [{ id: headers["webhook-id"], type: headers["x-event-type"],
      subject: `${headers["x-aggregate-type"]}/${headers["x-aggregate-id"]}`, data: JSON.parse(body) }];
  }
  const parsed = HTTP.toEvent({ headers, body }); // a CloudEvent, or an array of them for a batch
  return (Array.isArray(parsed) ? parsed : [parsed]).map((ev) => ({
    id: ev.id, type: ev.type, subject: ev.subject, sequence: ev.sequence, data: ev.data,
  }));
}

const server = http.createServer(async (req, res) => {
  const body = await readBody(req);
  try {
    // Checks webhook-signature over webhook-id.webhook-timestamp.body, and that the timestamp
    // is within five minutes; throws otherwise.
    webhook.verify(body, req.headers);
  } catch (err) {
    console.log(JSON.stringify({ rejected: String(err.message ?? err) }));
    res.writeHead(401).end();
    return;
  }
  for (const ev of events(req.headers, body)) {
    if (seen.has(ev.id)) continue; // a redelivery: same id, no second effect
    seen.add(ev.id);
    console.log(JSON.stringify(ev));
  }
  res.writeHead(200).end();
});

server.listen(Number(process.env.PORT ?? 8080), "127.0.0.1", () => {
  console.log(JSON.stringify({ listening: server.address().port }));
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
