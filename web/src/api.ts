// The public API, as the dashboard uses it: every call carries the signed-in token.

const TOKEN_KEY = 'meridian.token';

export class ApiError extends Error {
  // field: what the server named as refused ("spec.gpus", "metadata.name", "spec.dependencies[0]").
  constructor(public status: number, message: string, public field?: string) {
    super(message);
  }
}

export function savedToken(): string {
  return sessionStorage.getItem(TOKEN_KEY) ?? '';
}

export function saveToken(token: string): void {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

async function call(path: string, init: RequestInit = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  headers.set('Authorization', `Bearer ${savedToken()}`);
  let res: Response;
  try {
    res = await fetch(`/api/v1${path}`, { ...init, headers });
  } catch {
    throw new ApiError(0, 'the server cannot be reached');
  }
  if (!res.ok) {
    let message = `${res.status} ${res.statusText}`;
    let field: string | undefined;
    try {
      const body = await res.json();
      if (body?.error?.message) message = body.error.message;
      if (typeof body?.error?.field === 'string' && body.error.field) field = body.error.field;
    } catch {
      // not JSON: keep the status line
    }
    throw new ApiError(res.status, message, field);
  }
  return res;
}

export async function get<T>(path: string, signal?: AbortSignal): Promise<T> {
  return (await call(path, { signal })).json() as Promise<T>;
}

export async function post<T>(path: string, body?: unknown): Promise<T> {
  const init: RequestInit = { method: 'POST' };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers = { 'Content-Type': 'application/json' };
  }
  return (await call(path, init)).json() as Promise<T>;
}

// The text of a task's output from `offset`, with the whole size the server holds.
export async function getLogs(job: number, task: number, offset: number, limit: number) {
  const res = await call(`/jobs/${job}/logs?task=${task}&offset=${offset}&limit=${limit}`);
  return { text: await res.text(), size: Number(res.headers.get('X-Meridian-Log-Size') ?? 0) };
}

// ---- what the API answers (docs/openapi.yaml) ----

export interface Role {
  role: string;
  organization?: string;
  team?: string;
  project?: string;
}
export interface WhoAmI {
  user: string;
  roles: Role[];
  projects: string[];
  identityProvider?: string; // signed in with an ID token of this provider
  expiresAt?: number;
}

export interface Gpu {
  index: number;
  uuid: string;
  allocatedMilli: number; // MIG instances by their share, fractions by their milli
  freeMilli: number; // free to schedule: 0 on lost or cordoned nodes and unhealthy GPUs
  mig: boolean;
  healthy: boolean;
  // Held by work outside Meridian (a Slurm user's own job), and why: occupied, not unhealthy.
  unmanaged?: string;
  utilization?: number;
  memoryUsedMib?: number;
  temperatureC?: number;
  powerW?: number;
  eccErrors?: number;
  xidErrors?: number;
  lastXid?: number;
  migInstances?: string[];
}
export interface GpuHealth {
  index: number;
  cordoned: boolean;
  xid: number;
  reason: string;
  since: number;
  held: boolean;
  faults: number[];
}
// A warning before failure on a GPU (gpu set), or the node flagged for failing jobs: shown,
// alerted on, never a cordon by itself.
export interface NodeCondition {
  type: string;
  severity: string;
  gpu?: number;
  message: string;
  since: number;
  value: number;
}
export interface Node {
  name: string;
  cluster: string;
  pool: string;
  rack: string;
  model: string;
  cpuMilli: number;
  cpuFreeMilli: number;
  memoryMib: number;
  memoryFreeMib: number;
  schedulable: boolean;
  // Why its back end takes no work there now (a Slurm node drained or down in Slurm); '' if it does.
  unavailable?: string;
  gpus: Gpu[];
  source: 'registered' | 'declared';
  state?: string;
  // What operators asked of it: '' (schedulable), 'cordoned', 'draining' (jobs still hold it) or
  // 'drained'.
  scheduling?: string;
  drain?: { deadline: number; reason: string; by: string; at: number };
  // GPUs that faulted: a cordoned one waits for its reset (held: for an operator).
  gpuHealth?: GpuHealth[];
  conditions?: NodeCondition[];
  lastHeartbeat?: number;
  simulated?: boolean;
  address?: string;
}

export interface ConfigObject<S = Record<string, unknown>> {
  kind: string;
  metadata: { name: string };
  spec: S;
}
export interface ClusterSpec {
  type: 'on-prem' | 'cloud';
  region?: string;
  backend?: string;
  prices?: Record<string, number>;
}

export interface Allocation {
  task: number;
  cluster: string;
  node: string;
  devices: { gpu: number; uuid: string; milli: number; memoryMib?: number; mig?: { profile: string } }[];
}
export interface Job {
  id: number;
  metadata: { name: string; project: string; user: string };
  spec: {
    type?: string;
    priorityClass?: string;
    tasks?: number;
    gpus?: number;
    gpuMilli?: number;
    migProfile?: string;
    command?: string[];
    image?: string;
    [k: string]: unknown;
  };
  status: {
    phase: string;
    reason: string;
    allocation: Allocation[] | null;
    generation: number;
    submittedAt: number;
    updatedAt: number;
    startedAt?: number;
    finishedAt?: number;
    restarts?: number;
    // Why it failed (oom-killed, gpu-fault, command-not-found, ...), when it did.
    cause?: string;
    tasks?: { state: string; node?: string; exitCode?: number; restarts?: number; message?: string; cause?: string }[];
  };
}
// GET /nodes/{name}/history: each GPU's columns, one value per time in `at`.
export interface NodeHistory {
  interval: number;
  at: number[];
  gpus: { index: number; utilization: (number | null)[]; memoryUsedMib: (number | null)[] }[];
}
export interface NodeOperations {
  [k: string]: unknown;
}
export interface JobPage {
  items: Job[];
  continue: number | null;
}
export interface Event {
  seq: number;
  at: number;
  objectKind: string;
  object: string;
  project: string;
  type: string;
  reason: string;
  message: string;
}
// A job the scheduler has not considered yet has only a message: no clusters, no estimate.
export interface Explanation {
  quota?: string;
  reason?: string;
  message?: string;
  clusters?: { name: string; reason: string }[];
  estimatedStart?: number | null;
}
export interface UsageRow {
  name: string;
  parent: string | null;
  weight: number;
  guaranteedGpus: number;
  limitGpus: number | null;
  usedGpus: number;
  borrowing: boolean;
  pending?: number;
  fairShare: number;
  fairShareRank: number;
  siblings: number; // under the same parent, itself included
}
export interface History {
  interval: number;
  at: number[];
  clusters: {
    cluster: string;
    model: string;
    gpus: (number | null)[];
    allocated: (number | null)[];
    utilization: (number | null)[];
  }[];
  queue: { pending: number[]; running: number[] };
  quota: { name: string; usedGpus: (number | null)[] }[];
}
export interface AuditEntry {
  seq: number;
  at: number;
  user: string;
  method: string;
  path: string;
  action: string;
  project: string;
  code: number;
  result: string;
  message: string;
}

// GET /alerts: what the server's alert rules hold now (docs/adr/0017-alerting.md).
export interface Alert {
  rule: string;
  state: 'pending' | 'firing';
  labels: Record<string, string>; // alertname, rule, severity, and what it is about
  annotations: Record<string, string>; // summary, description, ...
  activeSince: number;
  firedAt: number | null;
  value: number;
}

// A Budget document with what its scope spent (docs/adr/0041-budgets.md); `status` is absent
// until the server first evaluates it.
export interface BudgetSpec {
  organization?: string;
  team?: string;
  project?: string;
  period: 'month' | 'rolling';
  window?: number;
  amount?: number;
  gpuHours?: number;
  thresholds?: number[];
  action: 'alert' | 'block-bursts' | 'block-cloud';
  clusters?: string[];
}
export interface BudgetStatus {
  evaluatedAt: number;
  period: { from: number; to: number };
  spent: { cost: number; gpuHours: number };
  rate: { costPerHour: number; gpuHoursPerHour: number };
  forecast: { cost: number; gpuHours: number; percent: number };
  percent: number;
  crossed: number[];
  exhausted: boolean;
  blocking: string;
  summary: string;
}
export interface Budget extends ConfigObject<BudgetSpec> {
  status?: BudgetStatus;
}

// GET /reports/usage with a step: each key's use per step.
export interface UsageSeries {
  from: number;
  to: number;
  by: string;
  total: { cost: number; gpuHours: number };
  series: { step: number; at: number[]; keys: { key: string; cost: number[]; gpuHours: number[] }[] };
}
