// Cluster → node → GPU: a heatmap of every GPU (utilisation or allocation), its MIG layout and
// health, and the jobs this user may see on each node.
import { useState } from 'preact/hooks';
import type { Gpu, Job, JobPage, Node } from '../api';
import { allocatedOf } from '../estate';
import { ago, num, pct } from '../format';
import { useApi } from '../live';
import { JobLink, Phase, Problem } from '../ui';

type Mode = 'utilization' | 'allocation';

// Light to dark blue: text switches to white past the middle so that it keeps its contrast.
function shade(v: number): { background: string; color: string } {
  const x = Math.min(1, Math.max(0, v));
  const light = [232, 240, 250];
  const dark = [12, 60, 130];
  const c = light.map((l, i) => Math.round(l + (dark[i] - l) * x));
  return { background: `rgb(${c.join(',')})`, color: x > 0.5 ? '#ffffff' : '#10161f' };
}

function gpuLabel(n: Node, g: Gpu): string {
  const parts = [
    `${n.name} GPU ${g.index}`,
    g.uuid,
    `allocated ${pct(allocatedOf(g))}`,
    g.utilization !== undefined ? `utilisation ${pct(g.utilization)}` : 'no telemetry',
  ];
  if (g.memoryUsedMib !== undefined) parts.push(`memory used ${g.memoryUsedMib} MiB`);
  if (g.temperatureC !== undefined) parts.push(`${g.temperatureC} °C`);
  if (g.powerW !== undefined) parts.push(`${Math.round(g.powerW)} W`);
  if (g.mig) parts.push(`MIG ${g.migInstances?.length ? g.migInstances.join(' ') : 'enabled, no instances'}`);
  if (g.unmanaged) parts.push(`held outside Meridian: ${g.unmanaged}`);
  else if (!g.healthy) parts.push('UNHEALTHY');
  const record = n.gpuHealth?.find((h) => h.index === g.index && h.cordoned);
  if (record) parts.push(`${record.held ? 'held' : 'cordoned pending a reset'}: ${record.reason}`);
  if (g.xidErrors) parts.push(`${g.xidErrors} XID errors (last ${g.lastXid})`);
  if (g.eccErrors) parts.push(`${g.eccErrors} ECC errors`);
  for (const c of n.conditions ?? []) {
    if (c.gpu === g.index) parts.push(`warning: ${c.message}`);
  }
  return parts.join(' · ');
}

function Cell({ n, g, mode }: { n: Node; g: Gpu; mode: Mode }) {
  const alloc = allocatedOf(g);
  const value = mode === 'utilization' ? g.utilization : alloc;
  const style = value === undefined ? { background: '#f1f3f6', color: '#10161f' } : shade(value);
  const text = value === undefined ? '–' : pct(value);
  const label = gpuLabel(n, g);
  return (
    <li class={`gpu${g.unmanaged ? ' unmanaged' : g.healthy ? '' : ' unhealthy'}${alloc > 0 ? ' allocated' : ''}`} style={style} title={label} aria-label={label}>
      <span class="gpu-index">{g.index}</span>
      <span class="gpu-value">{g.unmanaged ? '⊘' : g.healthy ? text : '✕'}</span>
      {g.mig && <span class="gpu-mig">{g.migInstances?.length ? g.migInstances.map((m) => m.split('@')[0]).join(' ') : 'MIG'}</span>}
    </li>
  );
}

export function ClusterView({ name }: { name: string }) {
  const [mode, setMode] = useState<Mode>('utilization');
  const nodes = useApi<{ items: Node[] }>('/nodes');
  const jobs = useApi<JobPage>('/jobs?phase=Placed,Running,Stopping&limit=1000');
  if (nodes.error) return <Problem message={nodes.error} />;
  if (!nodes.data) return <p aria-busy="true">Loading…</p>;
  const mine = nodes.data.items.filter((n) => n.cluster === name);
  const onNode = new Map<string, Job[]>();
  for (const j of jobs.data?.items ?? []) {
    for (const a of j.status.allocation ?? []) {
      const list = onNode.get(a.node) ?? [];
      if (!list.includes(j)) list.push(j);
      onNode.set(a.node, list);
    }
  }
  return (
    <>
      <p class="crumbs">
        <a href="#/estate">Estate</a> › {name}
      </p>
      <h1>Cluster {name}</h1>
      {!mine.length && <p>No nodes in this cluster yet: agents register them when they start.</p>}
      <fieldset class="toggle">
        <legend>Colour GPUs by</legend>
        {(['utilization', 'allocation'] as Mode[]).map((m) => (
          <label key={m}>
            <input type="radio" name="mode" value={m} checked={mode === m} onChange={() => setMode(m)} />
            {m === 'utilization' ? 'utilisation' : 'allocation'}
          </label>
        ))}
        <span class="legend" aria-hidden="true">
          <span style={shade(0)}>0%</span>
          <span style={shade(0.5)}>50%</span>
          <span style={shade(1)}>100%</span>
          <span class="gpu-legend-unhealthy">✕ unhealthy</span>
          <span class="gpu-legend-unmanaged">⊘ held outside Meridian</span>
        </span>
      </fieldset>
      <div class="nodes">
        {mine.map((n) => (
          <article class="node" key={n.name} data-testid={`node-${n.name}`}>
            <header>
              <h2>{n.name}</h2>
              <Phase phase={n.state ?? (n.schedulable ? 'Ready' : 'Unschedulable')} />
              {n.scheduling ? (
                <span class="badge badge-warn" title={n.drain?.reason ? `drain: ${n.drain.reason}` : undefined}>
                  {n.scheduling}
                </span>
              ) : null}
              {n.unavailable ? (
                <span class="badge badge-warn" title={n.unavailable}>
                  unavailable
                </span>
              ) : null}
              {n.conditions?.length ? (
                <span class="badge badge-warn" data-testid={`conditions-${n.name}`} title={n.conditions.map((c) => c.message).join('\n')}>
                  {n.conditions.map((c) => c.type).join(', ')}
                </span>
              ) : null}
              {n.source === 'declared' ? (
                <span class="badge">declared by pool</span>
              ) : n.simulated ? (
                <span class="badge">simulated GPUs</span>
              ) : n.gpus.length ? (
                <span class="badge">real GPUs (NVML)</span>
              ) : null}
            </header>
            <p class="muted">
              {n.model || 'no GPUs'} · pool {n.pool} · rack {n.rack || '–'} · CPU {num((n.cpuMilli - n.cpuFreeMilli) / 1000)}/{num(n.cpuMilli / 1000)} ·
              memory {Math.round((n.memoryMib - n.memoryFreeMib) / 1024)}/{Math.round(n.memoryMib / 1024)} GiB
              {n.lastHeartbeat ? ` · heartbeat ${ago(n.lastHeartbeat)}` : ''}
            </p>
            <ul class="heatmap" aria-label={`GPUs of ${n.name}, coloured by ${mode}`}>
              {n.gpus.map((g) => (
                <Cell key={g.index} n={n} g={g} mode={mode} />
              ))}
            </ul>
            {(onNode.get(n.name) ?? []).length > 0 && (
              <p class="node-jobs">
                Jobs:{' '}
                {(onNode.get(n.name) ?? []).map((j, i) => (
                  <span key={j.id}>
                    {i > 0 && ', '}
                    <JobLink id={j.id} name={j.metadata.name} />
                  </span>
                ))}
              </p>
            )}
          </article>
        ))}
      </div>
    </>
  );
}
