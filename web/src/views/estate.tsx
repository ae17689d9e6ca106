// Estate: every cluster, on-prem and cloud, at a glance, and how the estate moved over time.
import type { Alert, ClusterSpec, ConfigObject, Job, JobPage, Node } from '../api';
import { Chart } from '../chart';
import { idleJobs, summarise, totals, type ClusterSum, IDLE_BELOW } from '../estate';
import { ago, money, num, pct, placement } from '../format';
import { allocatedBy, useHistory, utilisationBy } from '../history';
import { useApi } from '../live';
import { JobLink, Problem, Section, Stat, Table } from '../ui';

export function EstateView() {
  const nodes = useApi<{ items: Node[] }>('/nodes');
  const clusters = useApi<{ items: ConfigObject<ClusterSpec>[] }>('/clusters');
  const active = useApi<JobPage>('/jobs?phase=Pending,Placed,Running,Stopping&limit=1000');
  const { history, error: historyError, rangeControl } = useHistory();
  const error = nodes.error ?? clusters.error;
  if (error) return <Problem message={error} />;
  if (!nodes.data || !clusters.data) return <p aria-busy="true">Loading the estate…</p>;
  const sums = summarise(nodes.data.items, clusters.data.items);
  const t = totals(sums);
  const jobs = active.data?.items ?? [];
  const pending = jobs.filter((j) => j.status.phase === 'Pending').length;
  const sites: [string, ClusterSum[]][] = [
    ['On-premises', sums.filter((c) => c.type !== 'cloud')],
    ['Cloud', sums.filter((c) => c.type === 'cloud')],
  ];
  return (
    <>
      <h1>Estate</h1>
      <div class="stats" role="list" aria-label="Totals">
        <Stat label="GPUs" value={String(t.gpus)} />
        <Stat label="Allocated" value={`${num(t.allocated)} (${pct(t.gpus ? t.allocated / t.gpus : null)})`} />
        <Stat label="Free" value={num(t.gpus - t.allocated - t.unmanaged)} />
        {t.unmanaged > 0 && <Stat label="Held outside Meridian" value={String(t.unmanaged)} hint="GPUs that work submitted to a back end directly holds" />}
        <Stat label="Allocated but idle" value={String(t.idle)} hint={`under ${pct(IDLE_BELOW)} busy`} />
        <Stat label="Utilisation" value={pct(t.utilization)} />
        <Stat label="Cost / hour" value={money(t.cost)} />
        <Stat label="Running jobs" value={String(jobs.length - pending)} />
        <Stat label="Pending jobs" value={String(pending)} />
        <Stat label="Unhealthy GPUs" value={String(t.unhealthy)} warn={t.unhealthy > 0} />
      </div>
      <FiringAlerts />
      <div class="sites">
      {sites.map(([site, list]) =>
        list.length ? (
          <section key={site} aria-labelledby={`site-${site}`}>
            <h2 id={`site-${site}`}>{site}</h2>
            <div class="cards">
              {list.map((c) => (
                <ClusterCard key={c.name} c={c} />
              ))}
            </div>
          </section>
        ) : null,
      )}
      </div>
      <IdleJobs nodes={nodes.data.items} jobs={jobs} />
      <section aria-labelledby="trends">
        <h2 id="trends">Over time</h2>
        {rangeControl}
        {historyError && <Problem message={historyError} />}
        {history && (
          <div class="charts">
            <Chart title="GPU utilisation by cluster" testId="chart-util-cluster" at={history.at} series={utilisationBy(history, 'cluster')} unit="%" />
            <Chart title="GPU utilisation by model" testId="chart-util-model" at={history.at} series={utilisationBy(history, 'model')} unit="%" />
            <Chart title="GPUs allocated by cluster" testId="chart-alloc-cluster" at={history.at} series={allocatedBy(history, 'cluster')} unit="GPUs" />
            <Chart
              title="Queue length"
              testId="chart-queue"
              at={history.at}
              series={[
                { label: 'pending', values: history.queue.pending },
                { label: 'running', values: history.queue.running },
              ]}
              unit="jobs"
            />
          </div>
        )}
      </section>
    </>
  );
}

function ClusterCard({ c }: { c: ClusterSum }) {
  const unhealthy = c.models.reduce((s, m) => s + m.unhealthy, 0);
  const unmanaged = c.models.reduce((s, m) => s + m.unmanaged, 0);
  const health =
    c.lost || unhealthy
      ? [c.lost ? `${c.lost} node${c.lost > 1 ? 's' : ''} lost` : '', unhealthy ? `${unhealthy} GPU${unhealthy > 1 ? 's' : ''} unhealthy` : '']
          .filter(Boolean)
          .join(', ')
      : 'healthy';
  return (
    <article class="card" data-testid={`cluster-${c.name}`}>
      <header>
        <h3>
          <a href={`#/clusters/${encodeURIComponent(c.name)}`}>{c.name}</a>
        </h3>
        <span class="muted">
          {c.type || 'unconfigured'}
          {c.region ? ` · ${c.region}` : ''}
        </span>
        {c.simulated && <span class="badge">simulated GPUs</span>}
      </header>
      <p>
        {c.ready} of {c.nodes} nodes ready · <span class={c.lost || unhealthy ? 'bad' : 'good'}>{health}</span>
        {unmanaged ? ` · ${unmanaged} GPU${unmanaged > 1 ? 's' : ''} held outside Meridian` : ''} · {money(c.costPerHour)}/h
      </p>
      <Table
        caption={<span class="sr-only">GPUs of {c.name} by model</span>}
        rows={c.models}
        rowKey={(m) => m.model}
        empty="No GPUs registered yet."
        columns={[
          { label: 'Model', rowHeader: true, cell: (m) => m.model },
          { label: 'GPUs', numeric: true, cell: (m) => m.gpus },
          { label: 'Allocated', numeric: true, cell: (m) => num(m.allocated) },
          { label: 'Free', numeric: true, cell: (m) => num(m.gpus - m.allocated - m.unmanaged) },
          { label: 'Unmanaged', numeric: true, cell: (m) => m.unmanaged },
          { label: 'Idle', numeric: true, cell: (m) => m.idle },
          { label: 'Utilisation', numeric: true, cell: (m) => pct(m.utilization) },
          { label: 'Cost/h', numeric: true, cell: (m) => money(m.allocated * m.pricePerHour) },
        ]}
      />
    </article>
  );
}

// What the alert rules hold now, most severe first. The list is the caller's: a member sees the
// alerts of its projects and the estate's nodes (the API filters).
const SEVERITY_ORDER: Record<string, number> = { critical: 0, warning: 1, info: 2 };
const ABOUT = ['node', 'gpu', 'job_id', 'project', 'level', 'scope'];

function FiringAlerts() {
  const alerts = useApi<{ items: Alert[] }>('/alerts?state=firing');
  if (alerts.error) return <Problem message={alerts.error} />;
  const items = [...(alerts.data?.items ?? [])].sort(
    (a, b) =>
      (SEVERITY_ORDER[a.labels.severity] ?? 3) - (SEVERITY_ORDER[b.labels.severity] ?? 3) ||
      a.activeSince - b.activeSince,
  );
  return (
    <Section title="Firing alerts" id="alerts" count={items.length}>
      <Table
        testId="alerts"
        stack
        caption={<span class="sr-only">Alerts firing now, most severe first</span>}
        rows={items}
        rowKey={(a) => Object.entries(a.labels).map(([k, v]) => `${k}=${v}`).join(',')}
        rowAttrs={(a) => ({ 'data-alert': a.labels.alertname ?? a.rule })}
        empty="None: no alert rule holds."
        columns={[
          { label: 'Alert', rowHeader: true, cell: (a) => a.labels.alertname ?? a.rule },
          {
            label: 'Severity',
            cell: (a) => <span class={a.labels.severity === 'critical' ? 'bad' : undefined}>{a.labels.severity}</span>,
          },
          {
            label: 'About',
            cell: (a) =>
              ABOUT.filter((k) => a.labels[k] !== undefined)
                .map((k) => `${k} ${a.labels[k]}`)
                .join(' · '),
          },
          { label: 'Summary', cell: (a) => a.annotations.summary ?? '' },
          { label: 'Since', cell: (a) => ago(a.activeSince) },
        ]}
      />
    </Section>
  );
}

function IdleJobs({ nodes, jobs }: { nodes: Node[]; jobs: Job[] }) {
  const idle = idleJobs(nodes, jobs);
  return (
    <Section title="Jobs holding idle GPUs" id="idle" count={idle.length}>
      <Table
        testId="idle"
        stack
        caption={`Running jobs whose GPUs are under ${pct(IDLE_BELOW)} busy: candidates to reclaim.`}
        rows={idle}
        rowKey={(i) => i.job.id}
        rowAttrs={(i) => ({ 'data-job': i.job.id })}
        empty="None: every running job's GPUs are busy."
        columns={[
          { label: 'Job', rowHeader: true, cell: (i) => <JobLink id={i.job.id} name={i.job.metadata.name} /> },
          { label: 'Project', cell: (i) => i.job.metadata.project },
          { label: 'User', cell: (i) => i.job.metadata.user },
          { label: 'GPUs', numeric: true, cell: (i) => num(i.gpus) },
          { label: 'Utilisation', numeric: true, cell: (i) => pct(i.utilization) },
          { label: 'Placed on', cell: (i) => placement(i.job) },
          { label: 'Running since', cell: (i) => ago(i.job.status.startedAt) },
        ]}
      />
    </Section>
  );
}
