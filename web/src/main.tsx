// The dashboard: sign in with a token, then the views the token's role may see. Routes live in
// the URL's hash (#/queue, #/jobs/12), so that every view can be linked to and reloaded.
import 'uplot/dist/uPlot.min.css';
import './styles.css';
import { render } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, get, saveToken, savedToken, type WhoAmI } from './api';
import { startLive, useLiveStatus } from './live';
import { finishSignIn, startSignIn, type Provider } from './sso';
import { Problem } from './ui';
import { AuditView } from './views/audit';
import { ClusterView } from './views/cluster';
import { CostsView } from './views/costs';
import { EstateView } from './views/estate';
import { JobView } from './views/job';
import { JobsView } from './views/jobs';
import { NodeView } from './views/node';
import { QueueView } from './views/queue';
import { SubmitView } from './views/submit';
import { TeamsView } from './views/teams';

function useHash(): string {
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const on = () => setHash(location.hash);
    window.addEventListener('hashchange', on);
    return () => window.removeEventListener('hashchange', on);
  }, []);
  return hash;
}

function SignIn({ onSignedIn, message }: { onSignedIn: (who: WhoAmI) => void; message?: string }) {
  const [token, setToken] = useState('');
  const [error, setError] = useState(message ?? '');
  const [busy, setBusy] = useState(false);
  const [providers, setProviders] = useState<Provider[]>([]);
  useEffect(() => {
    get<{ items: Provider[] }>('/auth/providers').then(
      (r) => setProviders(r.items),
      () => setProviders([]),
    );
  }, []);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    saveToken(token.trim());
    try {
      onSignedIn(await get<WhoAmI>('/whoami'));
    } catch (err) {
      saveToken('');
      setError(err instanceof ApiError && err.status === 401 ? `Sign-in refused: ${err.message}.` : String((err as Error).message));
    } finally {
      setBusy(false);
    }
  };
  return (
    <main id="main" class="signin">
      <h1>Meridian</h1>
      {providers.map((p) => (
        <p key={p.name}>
          <button type="button" class="sso" disabled={busy} onClick={() => startSignIn(p).catch((err: Error) => setError(err.message))}>
            Sign in with {p.name}
          </button>
        </p>
      ))}
      <form onSubmit={submit} aria-describedby="signin-help">
        <label for="token">API token</label>
        <input id="token" name="token" type="password" autocomplete="off" required value={token} onInput={(e) => setToken((e.target as HTMLInputElement).value)} />
        <button type="submit" disabled={busy}>
          Sign in
        </button>
        {error && <Problem message={error} />}
      </form>
      <p id="signin-help" class="muted">
        The first admin token is in <code>DATA_DIR/admin.token</code>; <code>meridian token create</code> makes one for anyone else. An ID token of the identity provider is taken here too. The token stays in this tab only.
      </p>
    </main>
  );
}

const VIEWS = [
  { path: 'estate', label: 'Estate' },
  { path: 'queue', label: 'Queue' },
  { path: 'jobs', label: 'Jobs' },
  { path: 'submit', label: 'Submit' },
  { path: 'teams', label: 'Teams' },
  { path: 'costs', label: 'Costs' },
  { path: 'audit', label: 'Audit', admin: true },
];

function Shell({ who, onSignOut }: { who: WhoAmI; onSignOut: () => void }) {
  const hash = useHash();
  const live = useLiveStatus();
  const admin = who.roles.some((r) => r.role === 'admin');
  // #/jobs?phase=Failed: the view's path, then its query.
  const [route, search = ''] = hash.replace(/^#\/?/, '').split('?', 2);
  const parts = route.split('/').map(decodeURIComponent);
  const [first, second] = parts;
  const current = first || 'estate';
  const loaded = useRef(false);
  useEffect(() => {
    document.title = `${current[0].toUpperCase()}${current.slice(1)} · Meridian`;
    // Moving to another view moves the focus to its content, as a page load would put it at
    // the top; the first view keeps the browser's own start (the skip link comes first).
    if (loaded.current) document.getElementById('main')?.focus({ preventScroll: true });
    loaded.current = true;
  }, [hash]);
  let view;
  if (current === 'estate') view = <EstateView />;
  else if (current === 'clusters' && second) view = <ClusterView name={second} />;
  else if (current === 'queue') view = <QueueView />;
  else if (current === 'teams') view = <TeamsView />;
  else if (current === 'costs') view = <CostsView />;
  else if (current === 'jobs' && /^\d+$/.test(second ?? '')) view = <JobView id={Number(second)} />;
  else if (current === 'jobs' && !second) view = <JobsView query={new URLSearchParams(search)} who={who} />;
  else if (current === 'submit') view = <SubmitView who={who} />;
  else if (current === 'nodes' && second) view = <NodeView name={second} admin={admin} />;
  else if (current === 'audit') view = admin ? <AuditView /> : <Problem message="Only admins may read the audit log." />;
  else view = <Problem message={`No view at ${hash}.`} />;
  const roles = who.roles.map((r) => `${r.role}${r.project ? ` of ${r.project}` : r.team ? ` of ${r.team}` : r.organization ? ` of ${r.organization}` : ''}`);
  return (
    <>
      <a class="skip" href="#main" onClick={(e) => (e.preventDefault(), document.getElementById('main')?.focus())}>
        Skip to content
      </a>
      <header class="top">
        <span class="brand">Meridian</span>
        <nav aria-label="Views">
          <ul>
            {VIEWS.filter((v) => !v.admin || admin).map((v) => (
              <li key={v.path}>
                <a href={`#/${v.path}`} aria-current={current === v.path ? 'page' : undefined}>
                  {v.label}
                </a>
              </li>
            ))}
          </ul>
        </nav>
        <span class={`live ${live}`} role="status" aria-live="polite">
          {live === 'live' ? '● live' : '○ reconnecting…'}
        </span>
        <span class="who" data-testid="who">
          {who.user} <span class="muted">({roles.join(', ') || 'no role'})</span>
        </span>
        <button type="button" class="link" onClick={onSignOut}>
          Sign out
        </button>
      </header>
      <main id="main" tabIndex={-1}>
        {view}
      </main>
    </>
  );
}

function App() {
  const [who, setWho] = useState<WhoAmI | null>(null);
  const [checking, setChecking] = useState(true);
  const [message, setMessage] = useState<string>();
  useEffect(() => {
    // A return from the identity provider first (its code becomes the tab's token), then the
    // tab's token, if it has one.
    finishSignIn()
      .then(
        (token) => token && saveToken(token),
        (err: Error) => setMessage(`Sign-in failed: ${err.message}.`),
      )
      .then(() => (savedToken() ? get<WhoAmI>('/whoami').then(setWho, () => saveToken('')) : undefined))
      .finally(() => setChecking(false));
  }, []);
  useEffect(() => {
    if (!who) return;
    return startLive(() => {
      saveToken('');
      setWho(null);
      setMessage('Your token is no longer valid (expired or revoked): sign in again.');
    });
  }, [who]);
  if (checking) return <p aria-busy="true">Signing in…</p>;
  if (!who) return <SignIn onSignedIn={setWho} message={message} />;
  return (
    <Shell
      who={who}
      onSignOut={() => {
        saveToken('');
        setWho(null);
      }}
    />
  );
}

render(<App />, document.getElementById('app')!);
