// Live updates without reloading. A long poll on the event log (GET /events?wait=) wakes every
// view as soon as a job moves; a timer refreshes what changes without events (GPU telemetry).
import { useEffect, useState } from 'preact/hooks';
import { ApiError, get } from './api';

type Listener = () => void;
const listeners = new Set<Listener>();
const statusListeners = new Set<(s: LiveStatus) => void>();
export type LiveStatus = 'live' | 'reconnecting';
let status: LiveStatus = 'live';
let generation = 0; // bumps on sign-out: an older loop stops
let pendingBump: number | undefined;

function bump(): void {
  // Events come in bursts (a cycle places many jobs): one refresh for the burst.
  if (pendingBump !== undefined) return;
  pendingBump = window.setTimeout(() => {
    pendingBump = undefined;
    for (const l of listeners) l();
  }, 150);
}

function setStatus(s: LiveStatus): void {
  if (s === status) return;
  status = s;
  for (const l of statusListeners) l(s);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function startLive(onUnauthenticated: () => void, refreshMs = 5000): () => void {
  const mine = ++generation;
  const timer = window.setInterval(bump, refreshMs);
  (async () => {
    let after: string | number = 'latest';
    while (mine === generation) {
      try {
        const r: { items: unknown[]; last: number } = await get(
          `/events?after=${after}&wait=25&limit=1000`,
        );
        if (mine !== generation) return;
        setStatus('live');
        if (after === 'latest' || r.items.length) bump();
        after = r.last;
      } catch (e) {
        if (mine !== generation) return;
        if (e instanceof ApiError && e.status === 401) return onUnauthenticated();
        setStatus('reconnecting');
        await sleep(2000);
      }
    }
  })();
  return () => {
    generation++;
    window.clearInterval(timer);
  };
}

// A number that changes whenever the views should read again.
export function useTick(): number {
  const [tick, setTick] = useState(0);
  useEffect(() => {
    const l = () => setTick((t) => t + 1);
    listeners.add(l);
    return () => void listeners.delete(l);
  }, []);
  return tick;
}

export function useLiveStatus(): LiveStatus {
  const [s, setS] = useState(status);
  useEffect(() => {
    statusListeners.add(setS);
    return () => void statusListeners.delete(setS);
  }, []);
  return s;
}

// GETs `path` now and at every tick; keeps the last answer while the next is on its way. A null
// path reads nothing.
export function useApi<T>(path: string | null): { data?: T; error?: string } {
  const tick = useTick();
  const [state, setState] = useState<{ data?: T; error?: string; path?: string | null }>({});
  useEffect(() => {
    if (path === null) return;
    const abort = new AbortController();
    get<T>(path, abort.signal).then(
      (data) => setState({ data, path }),
      (e: unknown) => {
        if (abort.signal.aborted) return;
        const error = e instanceof Error ? e.message : String(e);
        setState((old) => ({ data: old.path === path ? old.data : undefined, error, path }));
      },
    );
    return () => abort.abort();
  }, [path, tick]);
  // A different path's answer is not this one's.
  return state.path === path ? { data: state.data, error: state.error } : {};
}
