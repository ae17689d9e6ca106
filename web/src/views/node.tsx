// One node: its GPUs with their telemetry over time, the jobs on it, its events, and the
// operators' cordon, drain and uncordon (admins; the server decides, and says why it refuses).
import { useState } from 'preact/hooks';
import { post, type Event, type Job, type JobPage, type Node, type NodeHistory } from '../api';
import { allocatedOf } from '../estate';
import { Chart } from '../chart';
import { ago, clock, dateTime, num, pct } from '../format';
import { useApi } from '../live';
import { JobLink, Phase, Problem, Section, Table } from '../ui';

// The last hour (what the server keeps of a node), its start rounded to the minute so that the
// path changes once a minute.
export function sinceAnHourAgo(from = 0): number {
  return Math.max(from, Math.floor((Date.now() / 1000 - 3600) / 60) * 60);
}

function Operations({ node, admin }: { node: Node; admin: boolean }) {
  const [error, setError] = useState('');
  const [draining, setDraining] = useState(false);
  const [reason, setReason] = useState('');
  const [busy, setBusy] = useState(false);
  const name = encodeURIComponent(node.name);
  const act = async (what: 'cordon' | 'uncordon' | 'drain', body?: unknown) => {
    setError('');
    setBusy(true);
    try {
      await post(`/nodes/${name}/${what}`, body);
      setDraining(false);
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
    } finally {
      setBusy(false);
    }
  };
  if (node.source === 'declared') {
    return <p class="muted">A node declared by its pool: operators cordon and drain registered nodes only.</p>;
  }
  const why = admin ? undefined : 'Only admins may cordon, drain or uncordon a node.';
  const off = busy || !admin;
  return (
    <div class="actions" data-testid="node-actions">
      {node.scheduling ? (
        <button type="button" class="secondary" disabled={off} title={why} onClick={() => act('uncordon')}>
          Uncordon
        </button>
      ) : (
        <button type="button" class="secondary" disabled={off} title={why} onClick={() => act('cordon')}>
          Cordon
        </button>
      )}
      {node.scheduling !== 'draining' && node.scheduling !== 'drained' && !draining && (
        <button type="button" class="secondary" disabled={off} title={why} onClick={() => setDraining(true)}>
          Drain…
        </button>
      )}
      {draining && (
        <form
          class="actions"
          onSubmit={(e) => {
            e.preventDefault();
            act('drain', reason.trim() ? { reason: reason.trim() } : {});
          }}
        >
          <label for="drain-reason">Drain {node.name}: its jobs stop within their grace periods and are placed elsewhere. Reason</label>
          <input id="drain-reason" value={reason} maxLength={500} onInput={(e) => setReason((e.target as HTMLInputElement).value)} />
          <button type="submit" class="danger" disabled={busy}>
            Yes, drain it
          </button>
          <button type="button" class="secondary" onClick={() => setDraining(false)}>
            Keep it
          </button>
        </form>
      )}
      {why && <span class="muted">{why}</span>}
      {error && <Problem message={error} />}
    </div>
  );
}

export function NodeView({ name, admin }: { name: string; admin: boolean }) {
  const path = encodeURIComponent(name);
  const node = useApi<Node>(`/nodes/${path}`);
  const history = useApi<NodeHistory>(`/nodes/${path}/history?since=${sinceAnHourAgo()}`);
  const jobs = useApi<JobPage>('/jobs?phase=Placed,Running,Stopping&limit=1000');
  const events = useApi<{ items: Event[] }>(admin ? `/events?objectKind=Node&object=${path}&order=newest&limit=50` : null);
  if (node.error) return <Problem message={node.error} />;
  if (!node.data) return <p aria-busy="true">Loading node {name}…</p>;
  const n = node.data;
  const here: Job[] = (jobs.data?.items ?? []).filter((j) => (j.status.allocation ?? []).some((a) => a.node === n.name));
  const jobOfGpu = new Map<number, Job>();
  for (const j of here) {
    for (const a of j.status.allocation ?? []) {
      if (a.node === n.name) for (const d of a.devices) jobOfGpu.set(d.gpu, j);
    }
  }
  const h = history.data;
  const gpuSeries = (k: 'utilization' | 'memoryUsedMib') =>
    (h?.gpus ?? []).map((g) => ({ label: `GPU ${g.index}`, values: k === 'utilization' ? g.utilization : g.memoryUsedMib.map((v) => (v == null ? null : v / 1024)) }));
  return (
    <>
      <p class="crumbs">
        <a href="#/estate">Estate</a> › <a href={`#/clusters/${encodeURIComponent(n.cluster)}`}>{n.cluster}</a> › {n.name}
      </p>
      <h1>
        Node {n.name} <Phase phase={n.state ?? (n.schedulable ? 'Ready' : 'Unschedulable')} />{' '}
        {n.scheduling && (
          <span class="badge badge-warn" data-testid="node-scheduling" title={n.drain?.reason ? `drain: ${n.drain.reason}` : undefined}>
            {n.scheduling}
          </span>
        )}
      </h1>
      <Operations node={n} admin={admin} />
      <dl class="facts">
        <dt>Cluster · pool · rack</dt>
        <dd>
          {n.cluster} · {n.pool} · {n.rack || '–'}
        </dd>
        <dt>GPUs</dt>
        <dd>
          {n.gpus.length} × {n.model || 'none'}
          {n.simulated ? ' (simulated)' : ''}
        </dd>
        <dt>CPU</dt>
        <dd>
          {num((n.cpuMilli - n.cpuFreeMilli) / 1000)} of {num(n.cpuMilli / 1000)} cores allocated
        </dd>
        <dt>Memory</dt>
        <dd>
          {Math.round((n.memoryMib - n.memoryFreeMib) / 1024)} of {Math.round(n.memoryMib / 1024)} GiB allocated
        </dd>
        {n.unavailable ? (
          <>
            <dt>Unavailable</dt>
            <dd>{n.unavailable}</dd>
          </>
        ) : null}
        <dt>Heartbeat</dt>
        <dd>{n.lastHeartbeat ? ago(n.lastHeartbeat) : n.source === 'declared' ? 'declared by its pool' : '–'}</dd>
        {n.drain && (
          <>
            <dt>Drain</dt>
            <dd>
              by {n.drain.by} at {dateTime(n.drain.at)}
              {n.drain.reason ? `: ${n.drain.reason}` : ''}
            </dd>
          </>
        )}
        {n.conditions?.length ? (
          <>
            <dt>Warnings</dt>
            <dd>{n.conditions.map((c) => c.message).join('; ')}</dd>
          </>
        ) : null}
      </dl>
      <Section title="GPUs" id="gpus" count={n.gpus.length}>
        <Table
          testId="node-gpus"
          rows={n.gpus}
          rowKey={(g) => g.index}
          rowAttrs={(g) => ({ 'data-gpu': g.index })}
          empty="No GPUs."
          columns={[
            { label: 'GPU', rowHeader: true, cell: (g) => g.index },
            { label: 'UUID', cell: (g) => <code>{g.uuid}</code> },
            {
              label: 'Health',
              cell: (g) => (g.unmanaged ? <span title={g.unmanaged}>held outside Meridian</span> : g.healthy ? 'healthy' : <span class="bad">unhealthy</span>),
            },
            { label: 'Allocated', numeric: true, cell: (g) => pct(allocatedOf(g)) },
            { label: 'Job', cell: (g) => (jobOfGpu.get(g.index) ? <JobLink id={jobOfGpu.get(g.index)!.id} name={jobOfGpu.get(g.index)!.metadata.name} /> : '–') },
            { label: 'Utilisation', numeric: true, cell: (g) => pct(g.utilization) },
            { label: 'Memory used', numeric: true, cell: (g) => (g.memoryUsedMib === undefined ? '–' : `${num(g.memoryUsedMib / 1024)} GiB`) },
            { label: 'Temperature', numeric: true, cell: (g) => (g.temperatureC === undefined ? '–' : `${g.temperatureC} °C`) },
            { label: 'Power', numeric: true, cell: (g) => (g.powerW === undefined ? '–' : `${Math.round(g.powerW)} W`) },
            { label: 'MIG', cell: (g) => (g.mig ? g.migInstances?.join(' ') || 'enabled' : '–') },
          ]}
        />
      </Section>
      <Section title="Telemetry over the last hour" id="telemetry">
        {history.error && <Problem message={history.error} />}
        <div class="charts">
          <Chart title="Utilisation by GPU" at={h?.at ?? []} series={gpuSeries('utilization')} unit="%" testId="chart-node-util" />
          <Chart title="Memory used by GPU (GiB)" at={h?.at ?? []} series={gpuSeries('memoryUsedMib')} unit="GiB" testId="chart-node-memory" />
        </div>
      </Section>
      <Section title="Jobs on it" id="node-jobs" count={here.length}>
        <Table
          testId="node-job-list"
          rows={here}
          rowKey={(j) => j.id}
          rowAttrs={(j) => ({ 'data-job': j.id })}
          empty="No job holds resources here."
          columns={[
            { label: 'Job', rowHeader: true, cell: (j) => <JobLink id={j.id} name={j.metadata.name} /> },
            { label: 'Project', cell: (j) => j.metadata.project },
            { label: 'Phase', cell: (j) => <Phase phase={j.status.phase} /> },
            {
              label: 'GPUs here',
              cell: (j) =>
                (j.status.allocation ?? [])
                  .filter((a) => a.node === n.name)
                  .flatMap((a) => a.devices.map((d) => d.gpu))
                  .join(', ') || 'CPU only',
            },
          ]}
        />
      </Section>
      <Section title="Events" id="node-events">
        {!admin && <p class="muted">A node's events are the estate's: admins read them.</p>}
        {events.error && <Problem message={events.error} />}
        {admin && (
          <ol class="timeline" data-testid="node-events">
            {(events.data?.items ?? []).map((e) => (
              <li key={e.seq} class={e.type === 'Warning' ? 'warning' : ''}>
                <time dateTime={new Date(e.at * 1000).toISOString()}>{clock(e.at)}</time> <strong>{e.reason}</strong> {e.message}
              </li>
            ))}
            {events.data && !events.data.items.length && <li>No events yet.</li>}
          </ol>
        )}
      </Section>
    </>
  );
}
