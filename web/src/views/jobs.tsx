// Jobs: every job the user may read, history included, with search (name), filters (project,
// user, phase, cluster) applied by the server, and sorting. Pages follow the API's `continue`.
// The filters live in the URL (#/jobs?phase=Failed&project=research), so that a view can be
// linked to and reloaded.
import { useEffect, useState } from 'preact/hooks';
import type { ConfigObject, Job, JobPage, WhoAmI } from '../api';
import { dateTime, duration, placement, request } from '../format';
import { useApi } from '../live';
import { JobLink, Phase, Problem, Table, type Column, type SortOrder } from '../ui';

const PAGE = 50;
const PHASES = ['Pending', 'Placed', 'Running', 'Stopping', 'Succeeded', 'Failed', 'Cancelled'];
const FILTERS = ['name', 'project', 'user', 'phase', 'cluster'] as const;

function elapsed(j: Job): number | null {
  const start = j.status.startedAt;
  if (!start) return null;
  return (j.status.finishedAt ?? Date.now() / 1000) - start;
}

function exitCode(j: Job): string {
  const codes = (j.status.tasks ?? []).map((t) => t.exitCode).filter((c) => c !== undefined);
  return codes.length ? [...new Set(codes)].join(', ') : '–';
}

// Sorts within the page the server gave; the submission order is the server's own.
const SORTS: Record<string, (j: Job) => string | number> = {
  name: (j) => j.metadata.name.toLowerCase(),
  project: (j) => j.metadata.project,
  user: (j) => j.metadata.user,
  phase: (j) => j.status.phase,
  gpus: (j) => (j.spec.tasks ?? 1) * (j.spec.gpus ?? (j.spec.gpuMilli ?? 0) / 1000),
  elapsed: (j) => elapsed(j) ?? -1,
};

export function JobsView({ query, who }: { query: URLSearchParams; who: WhoAmI }) {
  const clusters = useApi<{ items: ConfigObject[] }>('/clusters');
  const order = query.get('order') === 'oldest' ? 'oldest' : 'newest';
  const sortKey = query.get('sort') ?? 'submitted';
  const sortDir = query.get('dir') === 'asc' ? 'asc' : 'desc';
  const server = new URLSearchParams({ limit: String(PAGE), order });
  for (const f of FILTERS) {
    const v = query.get(f);
    if (v) server.set(f, v);
  }
  const key = server.toString();
  // The continue tokens of the pages before this one (the first page has none).
  // Other filters start again from the first page.
  const [paging, setPaging] = useState<{ key: string; pages: (number | null)[] }>({ key, pages: [null] });
  const pages = paging.key === key ? paging.pages : [null];
  const setPages = (p: (number | null)[]) => setPaging({ key, pages: p });
  const cont = pages[pages.length - 1];
  const jobs = useApi<JobPage>(`/jobs?${key}${cont ? `&continue=${cont}` : ''}`);
  const [name, setName] = useState(query.get('name') ?? '');
  const [user, setUser] = useState(query.get('user') ?? '');
  useEffect(() => {
    setName(query.get('name') ?? '');
    setUser(query.get('user') ?? '');
  }, [query.toString()]);

  // From the URL as it is now, not as this render saw it: after Clear (or another change) the
  // hash has moved before the view is drawn again, and a filter chosen meanwhile must not bring
  // the old ones back.
  const go = (changes: Record<string, string>) => {
    const next = new URLSearchParams(location.hash.split('?')[1] ?? '');
    for (const [k, v] of Object.entries(changes)) {
      if (v) next.set(k, v);
      else next.delete(k);
    }
    const s = next.toString();
    location.hash = `#/jobs${s ? `?${s}` : ''}`;
  };
  const onSort = (k: string) => {
    if (k === 'submitted') {
      go({ sort: '', dir: '', order: order === 'newest' ? 'oldest' : '' });
    } else {
      go({ sort: k, dir: sortKey === k && sortDir === 'asc' ? 'desc' : 'asc' });
    }
  };
  const sort: SortOrder =
    sortKey === 'submitted' ? { key: 'submitted', dir: order === 'newest' ? 'desc' : 'asc' } : { key: sortKey, dir: sortDir };
  let rows = jobs.data?.items ?? [];
  const by = SORTS[sortKey];
  if (by) {
    rows = [...rows].sort((a, b) => {
      const x = by(a);
      const y = by(b);
      const c = typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y));
      return (sortDir === 'asc' ? c : -c) || b.id - a.id;
    });
  }
  const columns: Column<Job>[] = [
    { label: 'Job', rowHeader: true, sortKey: 'name', cell: (j) => <JobLink id={j.id} name={j.metadata.name} /> },
    { label: 'Project', sortKey: 'project', cell: (j) => j.metadata.project },
    { label: 'User', sortKey: 'user', cell: (j) => j.metadata.user },
    { label: 'Phase', sortKey: 'phase', cell: (j) => <Phase phase={j.status.phase} /> },
    { label: 'Asks for', sortKey: 'gpus', cell: request },
    { label: 'Placed on', cell: placement },
    { label: 'Submitted', sortKey: 'submitted', cell: (j) => dateTime(j.status.submittedAt) },
    { label: 'Elapsed', sortKey: 'elapsed', cell: (j) => (elapsed(j) === null ? '–' : duration(elapsed(j)!)) },
    { label: 'Exit', cell: exitCode },
    { label: 'Reason', cls: 'reason', cell: (j) => j.status.reason || '–' },
  ];
  const projects = who.projects ?? [];
  return (
    <>
      <h1>Jobs</h1>
      <form
        class="filters"
        role="search"
        aria-label="Filter jobs"
        onSubmit={(e) => {
          e.preventDefault();
          go({ name: name.trim(), user: user.trim() });
        }}
      >
        <label>
          Name contains
          <input type="search" name="name" value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
        </label>
        <label>
          Project
          <select name="project" value={query.get('project') ?? ''} onChange={(e) => go({ project: (e.target as HTMLSelectElement).value })}>
            <option value="">any</option>
            {projects.map((p) => (
              <option key={p} value={p}>
                {p}
              </option>
            ))}
          </select>
        </label>
        <label>
          User
          <input name="user" value={user} onInput={(e) => setUser((e.target as HTMLInputElement).value)} />
        </label>
        <label>
          Phase
          <select name="phase" value={query.get('phase') ?? ''} onChange={(e) => go({ phase: (e.target as HTMLSelectElement).value })}>
            <option value="">any</option>
            <option value="Pending,Placed,Running,Stopping">active</option>
            <option value="Succeeded,Failed,Cancelled">ended</option>
            {PHASES.map((p) => (
              <option key={p} value={p}>
                {p}
              </option>
            ))}
          </select>
        </label>
        <label>
          Cluster
          <select name="cluster" value={query.get('cluster') ?? ''} onChange={(e) => go({ cluster: (e.target as HTMLSelectElement).value })}>
            <option value="">any</option>
            {(clusters.data?.items ?? []).map((c) => (
              <option key={c.metadata.name} value={c.metadata.name}>
                {c.metadata.name}
              </option>
            ))}
          </select>
        </label>
        <div>
          <button type="submit">Search</button>
        </div>
        {FILTERS.some((f) => query.get(f)) && (
          <div>
            <button type="button" class="secondary" onClick={() => (location.hash = '#/jobs')}>
              Clear
            </button>
          </div>
        )}
      </form>
      {jobs.error && <Problem message={jobs.error} />}
      {!jobs.data && !jobs.error && <p aria-busy="true">Loading jobs…</p>}
      {jobs.data && (
        <>
          <Table
            testId="jobs"
            rows={rows}
            rowKey={(j) => j.id}
            rowAttrs={(j) => ({ 'data-job': j.id })}
            empty="No job matches."
            columns={columns}
            sort={sort}
            onSort={onSort}
            stack
            caption={
              <>
                Page {pages.length}: {rows.length} jobs, {order === 'newest' ? 'newest' : 'oldest'} first by submission
                {sortKey !== 'submitted' ? `, sorted by ${sortKey} within the page` : ''}.
              </>
            }
          />
          <nav class="pager" aria-label="Pages">
            <button type="button" class="secondary" disabled={pages.length < 2} onClick={() => setPages(pages.slice(0, -1))}>
              Previous page
            </button>
            <button type="button" class="secondary" disabled={jobs.data.continue == null} onClick={() => setPages([...pages, jobs.data!.continue])}>
              Next page
            </button>
          </nav>
        </>
      )}
    </>
  );
}
