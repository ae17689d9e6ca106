// Checks docs/openapi.yaml, for ctest.
//
//   node check.mjs DOCUMENT                 the document is valid OpenAPI 3.0 (swagger-parser:
//                                           the OpenAPI schema, and every $ref resolves)
//   node check.mjs DOCUMENT ANSWERS.json    and every recorded answer matches the schema that the
//                                           document gives its path, method and status
//
// ANSWERS.json is [{method, path (the document's template, e.g. /api/v1/jobs/{id}), url,
// status, contentType, body}], written by tests/api_document_test.cc from a real server.
// Exits 0 when all holds, 1 with every problem on stderr otherwise.
import SwaggerParser from "@apidevtools/swagger-parser";
import Ajv from "ajv";
import addFormats from "ajv-formats";
import { readFileSync } from "node:fs";

const [documentPath, answersPath] = process.argv.slice(2);
if (!documentPath) {
  console.error("usage: node check.mjs DOCUMENT [ANSWERS.json]");
  process.exit(2);
}

let api;
try {
  // validate() checks against the OpenAPI 3.0 JSON schema and resolves every $ref.
  api = await SwaggerParser.validate(documentPath);
} catch (e) {
  console.error(`${documentPath}: not a valid OpenAPI document:\n${e.message}`);
  process.exit(1);
}
let responses = 0;
let withSchema = 0;
for (const [path, item] of Object.entries(api.paths)) {
  for (const [method, op] of Object.entries(item)) {
    if (!["get", "put", "post", "delete", "patch"].includes(method)) continue;
    for (const [status, r] of Object.entries(op.responses ?? {})) {
      responses++;
      // 101 Switching Protocols has no body (RFC 9110, 15.2.2): what follows is the WebSocket,
      // whose frames the operation's summary describes.
      if (status === "101" && !r.content) {
        withSchema++;
        continue;
      }
      const content = r.content ?? {};
      if (Object.values(content).some((c) => c.schema)) withSchema++;
      else console.error(`no schema: ${method.toUpperCase()} ${path} ${status}`);
    }
  }
}
console.log(
  `${documentPath}: valid OpenAPI ${api.openapi}; ${Object.keys(api.paths).length} paths, ` +
    `${responses} responses, ${withSchema} with a schema`,
);
if (withSchema !== responses) process.exit(1);
if (!answersPath) process.exit(0);

// OpenAPI 3.0 schemas are JSON Schema with a few keywords of their own: ajv knows `nullable`;
// `example` and the like are annotations.
const ajv = new Ajv({ allErrors: true, strict: false });
addFormats(ajv);
const deref = await SwaggerParser.dereference(documentPath);
const answers = JSON.parse(readFileSync(answersPath, "utf8"));
const compiled = new Map();
const problems = [];
const covered = new Set();
for (const a of answers) {
  const op = deref.paths[a.path]?.[a.method.toLowerCase()];
  const where = `${a.method} ${a.url} → ${a.status}`;
  if (!op) {
    problems.push(`${where}: the document has no ${a.method} ${a.path}`);
    continue;
  }
  const response = op.responses[String(a.status)] ?? op.responses.default;
  if (!response) {
    problems.push(`${where}: the document lists no ${a.status} for ${a.method} ${a.path}`);
    continue;
  }
  const type = (a.contentType ?? "").split(";")[0].trim();
  const media = response.content?.[type];
  if (!media?.schema) {
    problems.push(`${where}: the document gives no schema for ${type || "(no content type)"}`);
    continue;
  }
  covered.add(`${a.method} ${a.path} ${a.status}`);
  if (type !== "application/json") continue;  // text: the content type is what is checked
  const key = `${a.method} ${a.path} ${a.status} ${type}`;
  if (!compiled.has(key)) compiled.set(key, ajv.compile(media.schema));
  const validate = compiled.get(key);
  if (!validate(a.body)) {
    const errors = validate.errors
      .slice(0, 10)
      .map((e) => `  ${e.instancePath || "/"} ${e.message} ${JSON.stringify(e.params)}`)
      .join("\n");
    problems.push(`${where}: the body does not match the schema:\n${errors}\n  body: ${JSON.stringify(a.body).slice(0, 600)}`);
  }
}
// Every path and method of the document got an answer: none is left unchecked.
const called = new Set(answers.map((a) => `${a.method} ${a.path}`));
for (const [path, item] of Object.entries(deref.paths)) {
  for (const method of Object.keys(item)) {
    if (!["get", "put", "post", "delete", "patch"].includes(method)) continue;
    const key = `${method.toUpperCase()} ${path}`;
    if (!called.has(key)) problems.push(`${key}: no answer was checked`);
  }
}
for (const p of problems) console.error(p);
console.log(
  `${answers.length} answers checked: ${covered.size} (path, method, status) combinations, ` +
    `${problems.length} problems`,
);
process.exit(problems.length === 0 ? 0 : 1);
