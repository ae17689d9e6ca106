// Teams and projects: quota guaranteed, used and borrowed, fair-share position, and quota use
// over time. Shows only the parts of the tenancy tree this user may see.
import type { History, UsageRow } from '../api';
import { Chart } from '../chart';
import { num } from '../format';
import { useApi } from '../live';
import { Problem, Table } from '../ui';
import { useHistory } from '../history';

function depthOf(row: UsageRow, byName: Map<string, UsageRow>): number {
  let d = 0;
  for (let p = row.parent; p && byName.has(p); p = byName.get(p)!.parent) d++;
  return d;
}

// Parents before their children, siblings by name.
function treeOrder(rows: UsageRow[]): UsageRow[] {
  const names = new Set(rows.map((r) => r.name));
  const children = new Map<string | null, UsageRow[]>();
  for (const r of rows) {
    const parent = r.parent && names.has(r.parent) ? r.parent : null;
    children.set(parent, [...(children.get(parent) ?? []), r]);
  }
  const out: UsageRow[] = [];
  const walk = (p: string | null) => {
    for (const r of (children.get(p) ?? []).sort((a, b) => a.name.localeCompare(b.name))) {
      out.push(r);
      walk(r.name);
    }
  };
  walk(null);
  return out;
}

// GPUs used beyond the guarantee, when the scheduler says they are borrowed (a parent without a
// guarantee of its own is not borrowing what its children are guaranteed).
function borrowed(row: UsageRow): number {
  return row.borrowing ? Math.max(0, row.usedGpus - row.guaranteedGpus) : 0;
}

function Bar({ row }: { row: UsageRow }) {
  const scale = Math.max(row.limitGpus ?? 0, row.guaranteedGpus, row.usedGpus, 1);
  const over = borrowed(row);
  const within = row.usedGpus - over;
  return (
    <span class="bar" aria-hidden="true">
      <span class="bar-used" style={{ width: `${(within / scale) * 100}%` }} />
      <span class="bar-borrowed" style={{ width: `${(over / scale) * 100}%` }} />
      <span class="bar-guaranteed" style={{ left: `${(row.guaranteedGpus / scale) * 100}%` }} />
    </span>
  );
}

export function TeamsView() {
  const usage = useApi<{ items: UsageRow[] }>('/usage');
  const { history, rangeControl } = useHistory();
  if (usage.error) return <Problem message={usage.error} />;
  if (!usage.data) return <p aria-busy="true">Loading quotas…</p>;
  const byName = new Map(usage.data.items.map((r) => [r.name, r]));
  // Projects (the leaves) apart from the teams and organizations above them.
  const isParent = (name: string) => usage.data!.items.some((r) => r.parent === name);
  const quotaSeries = (h: History, parents: boolean) =>
    h.quota.filter((q) => isParent(q.name) === parents).map((q) => ({ label: q.name, values: q.usedGpus }));
  return (
    <>
      <h1>Teams and projects</h1>
      <Table
        testId="usage"
        caption="Quota in GPUs (any model). Use over the guarantee is borrowed from idle capacity, and reclaimed first when its owner needs it. Fair-share position 1 is served first among its siblings."
        rows={treeOrder(usage.data.items)}
        rowKey={(r) => r.name}
        rowAttrs={(r) => ({ 'data-row': r.name })}
        empty="No quota you may see."
        columns={[
          {
            label: 'Name',
            rowHeader: true,
            cell: (r) => <span style={{ paddingLeft: `${depthOf(r, byName) * 1.25}rem` }}>{r.name}</span>,
          },
          { label: 'Guaranteed', numeric: true, cell: (r) => num(r.guaranteedGpus) },
          { label: 'Limit', numeric: true, cell: (r) => (r.limitGpus === null ? 'none' : num(r.limitGpus)) },
          { label: 'Used', numeric: true, cell: (r) => num(r.usedGpus) },
          { label: 'Borrowed', numeric: true, cell: (r) => (borrowed(r) > 0 ? num(borrowed(r)) : '–') },
          { label: 'Use', cls: 'bar-col', cell: (r) => <Bar row={r} /> },
          { label: 'Pending', numeric: true, cell: (r) => r.pending ?? 0 },
          { label: 'Fair share', numeric: true, cell: (r) => `${r.fairShareRank} of ${r.siblings}` },
        ]}
      />
      <section aria-labelledby="quota-trend">
        <h2 id="quota-trend">Quota use over time</h2>
        {rangeControl}
        {history && (
          <div class="charts">
            <Chart
              title="GPUs used by project"
              testId="chart-quota"
              at={history.at}
              unit="GPUs"
              series={quotaSeries(history, false)}
            />
            <Chart
              title="GPUs used by team and organization"
              testId="chart-quota-teams"
              at={history.at}
              unit="GPUs"
              series={quotaSeries(history, true)}
            />
          </div>
        )}
      </section>
    </>
  );
}
