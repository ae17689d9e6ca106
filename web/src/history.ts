// Series for the charts from GET /history: utilisation by cluster or model, queue length.
import type { History } from './api';
import type { Series } from './chart';

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
