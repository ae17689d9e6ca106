// Costs: what each project, team or cluster spent this month (from the accounting records, runs
// still going included), against the budgets set for it and where each budget is heading at
// its recent rate (docs/adr/0040-accounting.md, docs/adr/0041-budgets.md).
import { useState } from 'preact/hooks';
import type { Budget, UsageSeries } from '../api';
import { Chart, type Series } from '../chart';
import { money, num } from '../format';
import { useApi } from '../live';
import { Problem, Stat, Table } from '../ui';

const HOUR = 3600;

// The first instant of the calendar month (UTC) that holds `t`, and of the month after: the
// period of a monthly budget.
function monthOf(t: number): [number, number] {
  const d = new Date(t * 1000);
  const from = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1) / 1000;
  const to = Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1) / 1000;
  return [from, to];
}

function scopeOf(b: Budget): { level: string; name: string } {
  const s = b.spec;
  if (s.project) return { level: 'project', name: s.project };
  if (s.team) return { level: 'team', name: s.team };
  return { level: 'organization', name: s.organization ?? '' };
}

// "1,234.50 of 5,000.00", "12.5 of 100 GPU-h", or both.
function spentOfLimit(b: Budget): string {
  const parts: string[] = [];
  const spent = b.status?.spent;
  if (b.spec.amount) parts.push(`${spent ? money(spent.cost) : '–'} of ${money(b.spec.amount)}`);
  if (b.spec.gpuHours) parts.push(`${spent ? num(spent.gpuHours) : '–'} of ${num(b.spec.gpuHours)} GPU-h`);
  return parts.join(', ');
}

function BudgetBar({ b }: { b: Budget }) {
  const used = b.status?.percent ?? 0;
  const forecast = b.status?.forecast.percent ?? 0;
  const scale = Math.max(100, used, forecast);
  return (
    <span class="bar" aria-hidden="true">
      <span class={used >= 100 ? 'bar-over' : 'bar-used'} style={{ width: `${(Math.min(used, scale) / scale) * 100}%` }} />
      <span class="bar-forecast" style={{ left: `${(forecast / scale) * 100}%` }} />
      <span class="bar-guaranteed" style={{ left: `${(100 / scale) * 100}%` }} />
    </span>
  );
}

// Each key's spend, summed step by step from the month's start; the steps after now are empty.
// Budgets of the chart's level give a line at their amount and, for monthly ones, their
// forecast from now to the month's end.
function spendSeries(report: UsageSeries, budgets: Budget[], by: string, now: number, end: number): { at: number[]; series: Series[] } {
  const { step } = report.series;
  const at = [...report.series.at];
  for (let t = (at.length ? at[at.length - 1] : report.from) + step; t < end; t += step) at.push(t);
  const series: Series[] = report.series.keys.map((k) => {
    let sum = 0;
    return {
      label: k.key,
      values: at.map((t, i) => {
        if (t > now) return null;
        sum += k.cost[i] ?? 0;
        return +sum.toFixed(4);
      }),
    };
  });
  for (const b of budgets) {
    const scope = scopeOf(b);
    // A budget that counts some clusters only is not drawn against its scope's whole spend.
    if (scope.level !== by || !b.spec.amount || b.spec.clusters?.length) continue;
    series.push({ label: `budget ${b.metadata.name}`, values: at.map(() => b.spec.amount!), dash: [6, 4] });
    const s = b.status;
    if (!s || b.spec.period !== 'month') continue;
    series.push({
      label: `forecast ${b.metadata.name}`,
      values: at.map((t) => (t + step < now ? null : +(s.spent.cost + (s.forecast.cost - s.spent.cost) * Math.min(1, Math.max(0, (t - now) / (end - now)))).toFixed(2))),
      dash: [2, 4],
    });
  }
  return { at, series };
}

export function CostsView() {
  const [by, setBy] = useState<'project' | 'team' | 'organization' | 'cluster'>('project');
  // The month to now, hour by hour; the path changes once an hour, not at every render.
  const hour = Math.floor(Date.now() / 1000 / HOUR) * HOUR;
  const [from, end] = monthOf(hour);
  const report = useApi<UsageSeries>(`/reports/usage?from=${from}&to=${hour + HOUR}&by=${by}&step=${HOUR}`);
  const budgets = useApi<{ items: Budget[] }>('/budgets');
  const items = budgets.data?.items ?? [];
  const blocking = items.filter((b) => b.status?.blocking);
  const chart = report.data && spendSeries(report.data, items, by, Date.now() / 1000, end);
  return (
    <>
      <h1>Costs</h1>
      {report.error && <Problem message={report.error} />}
      {budgets.error && <Problem message={budgets.error} />}
      <div class="stats" role="list">
        <Stat label="Spent this month" value={report.data ? money(report.data.total.cost) : '–'} hint={report.data ? `${num(report.data.total.gpuHours, 2)} GPU-hours` : undefined} />
        <Stat label="Budgets" value={String(items.length)} />
        <Stat label="Spent budgets" value={String(items.filter((b) => b.status?.exhausted).length)} warn={blocking.length > 0} hint={blocking.length ? `blocking: ${blocking.map((b) => b.metadata.name).join(', ')}` : undefined} />
      </div>
      <section aria-labelledby="budgets-title">
        <h2 id="budgets-title">Budgets</h2>
        <Table
          testId="budgets"
          rows={items}
          rowKey={(b) => b.metadata.name}
          empty="No budgets: a Budget document caps what an organization, team or project spends (meridian apply)."
          stack
          columns={[
            { label: 'Budget', cell: (b) => b.metadata.name, rowHeader: true },
            { label: 'Scope', cell: (b) => `${scopeOf(b).level} ${scopeOf(b).name}` },
            { label: 'Period', cell: (b) => (b.spec.period === 'month' ? 'this month' : `last ${num((b.spec.window ?? 0) / 86400)} days`) },
            { label: 'Spent', cell: (b) => spentOfLimit(b) },
            { label: 'Used', cls: 'bar-col', cell: (b) => (b.status ? <BudgetBar b={b} /> : '–') },
            { label: '%', numeric: true, cell: (b) => (b.status ? `${Math.floor(b.status.percent)}%` : '–') },
            { label: 'Forecast', numeric: true, cell: (b) => (b.status ? `${Math.round(b.status.forecast.percent)}%` : '–') },
            { label: 'Action', cell: (b) => b.spec.action },
            {
              label: 'Blocking',
              cell: (b) => (b.status?.blocking ? <span class="bad">{b.status.blocking}</span> : '–'),
            },
          ]}
        />
        <p class="muted">The forecast is each budget's spend at its period's end at the last day's rate. A spent budget stops new cloud capacity for its scope (block-bursts) or also its placements on cloud clusters (block-cloud); nothing running is stopped.</p>
      </section>
      <section aria-labelledby="spend-title">
        <h2 id="spend-title">Spend this month</h2>
        <label class="filter">
          By{' '}
          <select value={by} onChange={(e) => setBy((e.target as HTMLSelectElement).value as typeof by)}>
            <option value="project">project</option>
            <option value="team">team</option>
            <option value="organization">organization</option>
            <option value="cluster">cluster</option>
          </select>
        </label>
        {chart && <Chart title={by === 'cluster' ? 'Cumulative cost by cluster' : `Cumulative cost by ${by}, with the budgets of each ${by} and their forecasts`} at={chart.at} series={chart.series} unit="cost" testId="spend-chart" />}
        {report.data && (
          <Table
            testId="spend"
            rows={report.data.series.keys.map((k) => ({ key: k.key, cost: k.cost.reduce((a, b) => a + b, 0), gpuHours: k.gpuHours.reduce((a, b) => a + b, 0) }))}
            rowKey={(r) => r.key}
            empty="Nothing ran this month."
            columns={[
              { label: by[0].toUpperCase() + by.slice(1), cell: (r) => r.key, rowHeader: true },
              { label: 'GPU-hours', numeric: true, cell: (r) => num(r.gpuHours, 2) },
              { label: 'Cost', numeric: true, cell: (r) => money(r.cost) },
            ]}
          />
        )}
      </section>
    </>
  );
}
