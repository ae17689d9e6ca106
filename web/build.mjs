// Builds the dashboard into one folder (index.html, app.js, app.css) that `meridian server`
// embeds and serves at /. Type-checks first: a type error fails the build.
//   node build.mjs --out DIR [--no-check]
import { build } from 'esbuild';
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = dirname(fileURLToPath(import.meta.url));
const { values } = parseArgs({
  options: { out: { type: 'string', default: join(here, 'dist') }, 'no-check': { type: 'boolean' } },
});
const out = values.out;
mkdirSync(out, { recursive: true });

if (!values['no-check']) {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  try {
    execFileSync(process.execPath, [tsc, '--noEmit', '-p', here], { stdio: 'inherit' });
  } catch {
    console.error('web: type errors (above); the dashboard was not built');
    process.exit(1);
  }
}

await build({
  entryPoints: { app: join(here, 'src/main.tsx') },
  bundle: true,
  minify: true,
  sourcemap: false,
  format: 'esm',
  target: ['chrome110', 'firefox115', 'safari16'],
  jsx: 'automatic',
  jsxImportSource: 'preact',
  outdir: out,
  logLevel: 'warning',
  // app.css: the bundle's CSS (uPlot's and ours), imported from main.tsx.
});
for (const file of ['index.html', 'favicon.svg']) copyFileSync(join(here, 'src', file), join(out, file));
