// The openai Node SDK against the front door: one plain reply, one stream (with usage), and
// one refused request. Prints a JSON summary on stdout for the Python test to check.
//   node chat.mjs BASE_URL API_KEY
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
const messages = [{ role: "user", content: "Weather in Paris?" }];
const summary = {};

const reply = await client.chat.completions.create({ model: "toolrl", messages });
summary.plain = {
  content: reply.choices[0].message.content,
  finish: reply.choices[0].finish_reason,
  toolrl: reply.toolrl,
};

const stream = await client.chat.completions.create({
  model: "toolrl",
  messages,
  stream: true,
  stream_options: { include_usage: true },
});
const streamed = { content: "", events: [], finishes: [], usage: null, ids: new Set() };
for await (const chunk of stream) {
  streamed.ids.add(chunk.id);
  if (chunk.toolrl?.event) streamed.events.push(chunk.toolrl.event.type);
  for (const choice of chunk.choices) {
    streamed.content += choice.delta?.content ?? "";
    if (choice.finish_reason) streamed.finishes.push(choice.finish_reason);
  }
  if (chunk.usage) streamed.usage = chunk.usage;
}
summary.stream = { ...streamed, ids: streamed.ids.size };

try {
  await client.chat.completions.create({ model: "toolrl", messages, n: 2 });
  summary.refused = null;
} catch (error) {
  summary.refused = { status: error.status, name: error.constructor.name, message: error.message };
}
console.log(JSON.stringify(summary));
