// Sums over the node list: what the Estate and Cluster views show.
import type { ClusterSpec, ConfigObject, Gpu, Job, Node } from './api';

// An allocated GPU this little busy is idle: the waste the dashboard is there to show.
export const IDLE_BELOW = 0.1;

export interface ModelSum {
  model: string;
  gpus: number;
  allocated: number; // in GPUs: fractions and MIG slices in parts
  idle: number; // allocated, and reporting under IDLE_BELOW utilisation
  unhealthy: number;
  unmanaged: number; // held by work outside Meridian (a Slurm user's own job)
  utilization: number | null; // mean of the GPUs that report it
  pricePerHour: number; // per GPU
}

export interface ClusterSum {
  name: string;
  type: string;
  region: string;
  nodes: number;
  ready: number;
  lost: number;
  simulated: boolean;
  models: ModelSum[];
  costPerHour: number; // of what is allocated, at the cluster's prices
}

export function allocatedOf(g: Gpu): number {
  return g.allocatedMilli / 1000;
}

function emptyCluster(name: string, type: string, region: string): ClusterSum {
  return { name, type, region, nodes: 0, ready: 0, lost: 0, simulated: false, models: [], costPerHour: 0 };
}

export function summarise(nodes: Node[], clusters: ConfigObject<ClusterSpec>[]): ClusterSum[] {
  const out = new Map<string, ClusterSum>();
  const reporting = new Map<ModelSum, { sum: number; n: number }>();
  for (const c of clusters) {
    out.set(c.metadata.name, emptyCluster(c.metadata.name, c.spec.type ?? 'on-prem', c.spec.region ?? ''));
  }
  const prices = new Map(clusters.map((c) => [c.metadata.name, c.spec.prices ?? {}]));
  for (const n of nodes) {
    let c = out.get(n.cluster);
    if (!c) {
      c = emptyCluster(n.cluster, '', ''); // a node of a cluster not (yet) configured
      out.set(n.cluster, c);
    }
    c.nodes++;
    if (n.state === 'Lost') c.lost++;
    else if (n.schedulable) c.ready++;
    c.simulated ||= !!n.simulated;
    if (!n.gpus.length) continue;
    let m = c.models.find((x) => x.model === n.model);
    if (!m) {
      m = { model: n.model, gpus: 0, allocated: 0, idle: 0, unhealthy: 0, unmanaged: 0, utilization: null, pricePerHour: prices.get(n.cluster)?.[n.model] ?? 0 };
      c.models.push(m);
      reporting.set(m, { sum: 0, n: 0 });
    }
    const r = reporting.get(m)!;
    for (const g of n.gpus) {
      m.gpus++;
      m.allocated += allocatedOf(g);
      if (g.unmanaged) m.unmanaged++;
      else if (!g.healthy) m.unhealthy++;
      if (g.utilization !== undefined) {
        r.sum += g.utilization;
        r.n++;
        if (allocatedOf(g) > 0 && g.utilization < IDLE_BELOW) m.idle++;
      }
    }
  }
  for (const c of out.values()) {
    for (const m of c.models) {
      const r = reporting.get(m)!;
      m.utilization = r.n ? r.sum / r.n : null;
      c.costPerHour += m.allocated * m.pricePerHour;
    }
  }
  return [...out.values()];
}

export function totals(cs: ClusterSum[]) {
  const t = { gpus: 0, allocated: 0, idle: 0, unhealthy: 0, unmanaged: 0, cost: 0, utilSum: 0, utilN: 0 };
  for (const c of cs) {
    t.cost += c.costPerHour;
    for (const m of c.models) {
      t.gpus += m.gpus;
      t.allocated += m.allocated;
      t.idle += m.idle;
      t.unhealthy += m.unhealthy;
      t.unmanaged += m.unmanaged;
      if (m.utilization !== null) {
        t.utilSum += m.utilization * m.gpus;
        t.utilN += m.gpus;
      }
    }
  }
  return { ...t, utilization: t.utilN ? t.utilSum / t.utilN : null };
}

export interface IdleJob {
  job: Job;
  gpus: number; // GPUs it holds, fractions in parts
  utilization: number; // mean over the GPUs it holds that report it
}

// Running jobs whose GPUs are allocated but hardly used (mean under IDLE_BELOW): the first place
// to look for GPUs to reclaim. Only jobs whose every GPU reports telemetry are judged.
export function idleJobs(nodes: Node[], jobs: Job[]): IdleJob[] {
  const byName = new Map(nodes.map((n) => [n.name, n]));
  const out: IdleJob[] = [];
  for (const job of jobs) {
    if (job.status.phase !== 'Running') continue;
    let sum = 0;
    let reporting = 0;
    let devices = 0;
    let milli = 0;
    for (const a of job.status.allocation ?? []) {
      for (const d of a.devices ?? []) {
        devices++;
        milli += d.milli;
        const u = byName.get(a.node)?.gpus[d.gpu]?.utilization;
        if (u === undefined) continue;
        sum += u;
        reporting++;
      }
    }
    if (!devices || reporting < devices) continue;
    if (sum / reporting < IDLE_BELOW) out.push({ job, gpus: milli / 1000, utilization: sum / reporting });
  }
  return out.sort((a, b) => b.gpus - a.gpus);
}
