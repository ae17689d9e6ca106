// Single sign-on in the browser (docs/adr/0021-single-sign-on.md): the authorization code flow
// with PKCE (RFC 7636). The tab goes to the identity provider and comes back to the dashboard with
// a code; the server exchanges the code, with this tab's verifier, at the provider's token
// endpoint (the page may connect to its own origin only) and hands back the ID token, which is
// then the tab's token as an API token would be.
import { post } from './api';

const PENDING_KEY = 'meridian.sso';

export interface Provider {
  name: string;
  issuer: string;
  clientId: string;
  scopes: string[];
  authorizationEndpoint?: string; // absent when the server could not reach the provider
}

function b64url(bytes: Uint8Array): string {
  let text = '';
  bytes.forEach((b) => (text += String.fromCharCode(b)));
  return btoa(text).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

const random = () => b64url(crypto.getRandomValues(new Uint8Array(32)));

// Where the provider sends the browser back: the dashboard itself (register it at the provider).
export const redirectUri = () => `${location.origin}/`;

export async function startSignIn(p: Provider): Promise<void> {
  if (!p.authorizationEndpoint) throw new Error(`the server cannot reach ${p.name} (${p.issuer}) just now: try again`);
  const verifier = random();
  const state = random();
  const nonce = random();
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier));
  sessionStorage.setItem(PENDING_KEY, JSON.stringify({ provider: p.name, verifier, state, nonce }));
  const url = new URL(p.authorizationEndpoint);
  const params: Record<string, string> = {
    response_type: 'code',
    client_id: p.clientId,
    redirect_uri: redirectUri(),
    scope: p.scopes.join(' '),
    state,
    nonce,
    code_challenge: b64url(new Uint8Array(digest)),
    code_challenge_method: 'S256',
  };
  for (const [k, v] of Object.entries(params)) url.searchParams.set(k, v);
  location.assign(url.toString());
}

// On the way back from the provider: the ID token, or null when this page load is not a return.
export async function finishSignIn(): Promise<string | null> {
  const params = new URLSearchParams(location.search);
  const code = params.get('code');
  const error = params.get('error');
  if (!code && !error) return null;
  const pending = JSON.parse(sessionStorage.getItem(PENDING_KEY) ?? 'null');
  sessionStorage.removeItem(PENDING_KEY);
  history.replaceState(null, '', location.pathname + location.hash); // the code is good once
  if (error) throw new Error(`the identity provider said: ${params.get('error_description') ?? error}`);
  if (!pending || pending.state !== params.get('state')) {
    throw new Error('this sign-in was not started in this tab (its state does not match): sign in again');
  }
  const answer = await post<{ idToken: string }>('/auth/token', {
    provider: pending.provider,
    code,
    codeVerifier: pending.verifier,
    redirectUri: redirectUri(),
    nonce: pending.nonce,
  });
  return answer.idToken;
}
