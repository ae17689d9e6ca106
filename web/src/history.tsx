// Series for the charts from GET /history: utilisation by cluster or model, queue length.
import { useState } from 'preact/hooks';
import type { History } from './api';
import type { Series } from './chart';
import { useApi } from './live';

const RANGES: [string, number][] = [
  ['15 minutes', 900],
  ['1 hour', 3600],
  ['6 hours', 6 * 3600],
];

// The history of the last `range` seconds, and a control to choose the range. The start is
// rounded to the minute, so that the path (and the request) changes once a minute, not at
// every render.
export function useHistory(): { history?: History; error?: string; rangeControl: preact.JSX.Element } {
  const [range, setRange] = useState(3600);
  const since = Math.floor((Date.now() / 1000 - range) / 60) * 60;
  const { data, error } = useApi<History>(`/history?since=${since}`);
  const rangeControl = (
    <label class="filter">
      Show the last{' '}
      <select value={range} onChange={(e) => setRange(Number((e.target as HTMLSelectElement).value))}>
        {RANGES.map(([label, seconds]) => (
          <option key={seconds} value={seconds}>
            {label}
          </option>
        ))}
      </select>
    </label>
  );
  return { history: data, error, rangeControl };
}

// The mean utilisation of every group sharing a key, weighted by its GPUs, at each sample.
export function utilisationBy(h: History, key: 'cluster' | 'model'): Series[] {
  const acc = new Map<string, { sum: number[]; weight: number[] }>();
  for (const g of h.clusters) {
    const k = g[key];
    let a = acc.get(k);
    if (!a) {
      a = { sum: h.at.map(() => 0), weight: h.at.map(() => 0) };
      acc.set(k, a);
    }
    h.at.forEach((_, i) => {
      const u = g.utilization[i];
      const n = g.gpus[i];
      if (u == null || n == null) return;
      a!.sum[i] += u * n;
      a!.weight[i] += n;
    });
  }
  return [...acc.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([label, a]) => ({ label, values: a.sum.map((s, i) => (a.weight[i] ? s / a.weight[i] : null)) }));
}

export function allocatedBy(h: History, key: 'cluster' | 'model'): Series[] {
  const acc = new Map<string, (number | null)[]>();
  for (const g of h.clusters) {
    const k = g[key];
    const v = acc.get(k) ?? h.at.map(() => null);
    g.allocated.forEach((x, i) => {
      if (x != null) v[i] = (v[i] ?? 0) + x;
    });
    acc.set(k, v);
  }
  return [...acc.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([label, values]) => ({ label, values }));
}
