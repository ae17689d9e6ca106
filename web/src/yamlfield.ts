// Where a field the server refused sits in a YAML document: the server names it by its path
// ("spec.gpus", "spec.dependencies[1]", "metadata.name"), as the CLI maps it to a line of the
// file (src/cli/verbs.cc, AtItsLine); the dashboard does the same for its YAML tab.
import { isMap, isScalar, isSeq, LineCounter, parseDocument, type Document } from 'yaml';

export interface ParsedYaml {
  doc?: Document.Parsed;
  value?: unknown;
  lines: LineCounter;
  errors: { line: number; message: string }[];
}

export function parseJobYaml(text: string): ParsedYaml {
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true });
  const errors = doc.errors.map((e) => ({ line: lines.linePos(e.pos[0]).line, message: e.message.split('\n')[0] }));
  if (errors.length) return { lines, errors };
  const value = doc.toJS();
  if (!value || typeof value !== 'object' || Array.isArray(value)) {
    return { lines, errors: [{ line: 1, message: 'expected a job document: kind, metadata and spec' }] };
  }
  return { doc, value, lines, errors: [] };
}

// "spec.dependencies[1]" → ['spec', 'dependencies', 1].
export function fieldPath(field: string): (string | number)[] {
  const out: (string | number)[] = [];
  for (const part of field.split('.')) {
    const m = part.match(/^([^[\]]*)((?:\[\d+\])*)$/);
    if (!m) {
      out.push(part);
      continue;
    }
    if (m[1]) out.push(m[1]);
    for (const i of m[2].matchAll(/\[(\d+)\]/g)) out.push(Number(i[1]));
  }
  return out;
}

// The line of the field (its key, or its item), or of the nearest part of its path the
// document has (a missing spec.command: the line of spec); 0 when none.
export function lineOf(parsed: ParsedYaml, field: string): number {
  if (!parsed.doc) return 0;
  let node: unknown = parsed.doc.contents;
  let offset: number | undefined;
  for (const seg of fieldPath(field)) {
    if (isMap(node)) {
      const pair = node.items.find((p) => isScalar(p.key) && String(p.key.value) === String(seg));
      if (!pair) break;
      offset = isScalar(pair.key) && pair.key.range ? pair.key.range[0] : offset;
      node = pair.value;
    } else if (isSeq(node) && typeof seg === 'number' && node.items[seg]) {
      const item = node.items[seg] as { range?: [number, number, number] };
      offset = item.range ? item.range[0] : offset;
      node = item;
    } else {
      break;
    }
  }
  return offset === undefined ? 0 : parsed.lines.linePos(offset).line;
}
