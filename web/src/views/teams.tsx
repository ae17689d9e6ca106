// Teams and projects: quota guaranteed, used and borrowed, fair-share position, and quota use
// over time. Shows only the parts of the tenancy tree this user may see.
import type { History, UsageRow } from '../api';
import { Chart } from '../chart';
import { num } from '../format';
import { useApi } from '../live';
import { Problem } from '../ui';

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

function Bar({ row }: { row: UsageRow }) {
  const scale = Math.max(row.limitGpus ?? 0, row.guaranteedGpus, row.usedGpus, 1);
  const within = Math.min(row.usedGpus, row.guaranteedGpus);
  const over = Math.max(0, row.usedGpus - row.guaranteedGpus);
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
  const history = useApi<History>('/history');
  if (usage.error) return <Problem message={usage.error} />;
  if (!usage.data) return <p aria-busy="true">Loading quotas…</p>;
  const byName = new Map(usage.data.items.map((r) => [r.name, r]));
  const siblings = (r: UsageRow) => usage.data!.items.filter((x) => x.parent === r.parent).length;
  return (
    <>
      <h1>Teams and projects</h1>
      <div class="scroll">
        <table data-testid="usage">
          <caption>
            Quota in GPUs (any model). Use over the guarantee is borrowed from idle capacity, and reclaimed first when its owner needs it.
            Fair-share position 1 is served first among its siblings.
          </caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col" class="n">Guaranteed</th>
              <th scope="col" class="n">Limit</th>
              <th scope="col" class="n">Used</th>
              <th scope="col" class="n">Borrowed</th>
              <th scope="col" class="bar-col">Use</th>
              <th scope="col" class="n">Pending</th>
              <th scope="col" class="n">Fair share</th>
            </tr>
          </thead>
          <tbody>
            {treeOrder(usage.data.items).map((r) => (
              <tr key={r.name} data-row={r.name}>
                <th scope="row" style={{ paddingLeft: `${0.5 + depthOf(r, byName) * 1.25}rem` }}>
                  {r.name}
                </th>
                <td class="n">{num(r.guaranteedGpus)}</td>
                <td class="n">{r.limitGpus === null ? 'none' : num(r.limitGpus)}</td>
                <td class="n">{num(r.usedGpus)}</td>
                <td class="n">{r.usedGpus > r.guaranteedGpus ? num(r.usedGpus - r.guaranteedGpus) : '–'}</td>
                <td class="bar-col">
                  <Bar row={r} />
                </td>
                <td class="n">{r.pending ?? 0}</td>
                <td class="n">
                  {r.fairShareRank} of {siblings(r)}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <section aria-labelledby="quota-trend">
        <h2 id="quota-trend">Quota use over time</h2>
        {history.data && (
          <div class="charts">
            <Chart
              title="GPUs used by project"
              testId="chart-quota"
              at={history.data.at}
              unit="GPUs"
              series={history.data.quota
                .filter((q) => !usage.data!.items.some((r) => r.parent === q.name))
                .map((q) => ({ label: q.name, values: q.usedGpus }))}
            />
            <Chart
              title="GPUs used by team and organization"
              testId="chart-quota-teams"
              at={history.data.at}
              unit="GPUs"
              series={history.data.quota
                .filter((q) => usage.data!.items.some((r) => r.parent === q.name))
                .map((q) => ({ label: q.name, values: q.usedGpus }))}
            />
          </div>
        )}
      </section>
    </>
  );
}
