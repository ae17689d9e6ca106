// The dashboard's single sign-on end to end, in real headless Chromium (Debian's, driven by
// playwright-core): a real `meridian server`, and a TEST ISSUER (tests/oidc_test_issuer.py, an
// OpenID Connect provider over real HTTP, the one fake here). The browser signs in with the
// authorization code flow and PKCE, and the dashboard shows the user with the role its group maps
// to; a code replayed, and a sign-in this tab did not start, are refused.
//
//   node tests/dashboard_sso_test.mjs   (ctest runs it; env: MERIDIAN_BINARY, WEB_DIR,
//                                        SOURCE_DIR, CHROMIUM (default /usr/bin/chromium))
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';

const binary = process.env.MERIDIAN_BINARY ?? 'build/meridian';
const webDir = process.env.WEB_DIR ?? 'web';
const sourceDir = process.env.SOURCE_DIR ?? '.';
const chromiumPath = process.env.CHROMIUM ?? '/usr/bin/chromium';
const { chromium } = createRequire(resolve(webDir, 'package.json'))('playwright-core');
const run = promisify(execFile);

const t0 = Date.now();
const step = (what) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)} s] ${what}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(what, fn, timeoutMs = 60000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn().catch(() => null);
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

const work = mkdtempSync(join(tmpdir(), 'meridian-sso-'));
const children = [];
const start = (cmd, args) => {
  const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  child.output = '';
  child.stdout.on('data', (d) => (child.output += d));
  child.stderr.on('data', (d) => (child.output += d));
  children.push(child);
  return child;
};
let browser;

try {
  const issuerPort = join(work, 'issuer.port');
  const issuer = start('/usr/bin/python3', [join(sourceDir, 'tests/oidc_test_issuer.py'), '--port-file', issuerPort,
    '--client-id', 'meridian', '--users', JSON.stringify({ alice: ['ml-research'] })]);
  const serverPort = join(work, 'server.port');
  const dataDir = join(work, 'data');
  const server = start(binary, ['server', '--listen', '127.0.0.1:0', '--port-file', serverPort, '--data-dir', dataDir]);
  await until('the test issuer', async () => existsSync(issuerPort) && readFileSync(issuerPort, 'utf8').trim());
  await until('the server', async () => existsSync(join(dataDir, 'admin.token')) && existsSync(serverPort) &&
    (await fetch(`http://127.0.0.1:${readFileSync(serverPort, 'utf8').trim()}/healthz`)).ok);
  const issuerUrl = `http://127.0.0.1:${readFileSync(issuerPort, 'utf8').trim()}`;
  const url = `http://127.0.0.1:${readFileSync(serverPort, 'utf8').trim()}`;
  const admin = readFileSync(join(dataDir, 'admin.token'), 'utf8').trim();
  const estate = join(work, 'estate.yaml');
  writeFileSync(estate, `kind: Organization
metadata: {name: acme}
---
kind: Team
metadata: {name: lab}
spec: {organization: acme}
---
kind: Project
metadata: {name: research}
spec: {team: lab}
---
kind: IdentityProvider
metadata: {name: corp}
spec:
  issuer: ${issuerUrl}
  clientId: meridian
  usernameClaim: preferred_username
  groups:
    - group: ml-research
      roles: [{role: member, project: research}]
`);
  await run(binary, ['apply', '-f', estate], {
    env: { ...process.env, MERIDIAN_SERVER: url, MERIDIAN_TOKEN: admin, MERIDIAN_CONFIG: '/nonexistent/config.json' },
  });
  step(`server at ${url}, test issuer at ${issuerUrl}`);

  const profile = join(work, 'profile');
  mkdirSync(profile);
  browser = await chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
    env: { ...process.env, HOME: profile, XDG_CONFIG_HOME: join(profile, '.config'), XDG_CACHE_HOME: join(profile, '.cache') },
  });
  const page = browser.pages()[0] ?? (await browser.newPage());
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(e.message));

  // ---- sign in: the dashboard, the provider's page, and back ----
  await page.goto(`${url}/`);
  await page.click('button:has-text("Sign in with corp")');
  await page.waitForURL(`${issuerUrl}/authorize?**`);
  const asked = new URL(page.url()).searchParams;
  assert.equal(asked.get('code_challenge_method'), 'S256');
  assert.equal(asked.get('redirect_uri'), `${url}/`);
  assert.match(asked.get('code_challenge'), /^[A-Za-z0-9_-]{43}$/);
  step('at the test issuer\'s sign-in page');
  await page.fill('#login', 'alice');
  await page.click('button[type=submit]');
  await page.waitForSelector('[data-testid=who]:has-text("corp:alice")');
  const who = await page.textContent('[data-testid=who]');
  assert.match(who, /member of research/);
  assert.equal(new URL(page.url()).search, '', 'the code is taken out of the address bar');
  const token = await page.evaluate(() => sessionStorage.getItem('meridian.token'));
  assert.equal(token.split('.').length, 3, 'the tab holds the ID token');
  step(`signed in: ${who.trim()}`);

  // ---- the code again (a replay from the history or a log): refused by the provider ----
  await page.click('button:has-text("Sign out")');
  const replay = await fetch(`${url}/api/v1/auth/token`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ provider: 'corp', code: 'made-up', codeVerifier: 'x'.repeat(43), redirectUri: `${url}/`, nonce: 'n' }),
  });
  assert.equal(replay.status, 401);
  assert.match((await replay.json()).error.message, /invalid_grant/);
  // ---- a return this tab did not start (a forged link with someone's code) ----
  await page.goto(`${url}/?code=stolen&state=forged`);
  await page.waitForSelector('[role=alert]:has-text("not started in this tab")');
  step('a replayed code and a forged return are refused');
  assert.deepEqual(pageErrors, []);
  console.log('dashboard single sign-on: ok');
} catch (e) {
  console.error(e);
  for (const c of children) console.error(c.output.slice(-3000));
  process.exitCode = 1;
} finally {
  if (browser) await browser.close().catch(() => {});
  for (const c of children) c.kill('SIGKILL');
  rmSync(work, { recursive: true, force: true });
}
