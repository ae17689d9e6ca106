// Queue: what waits (and why, and until when), what runs, and what failed lately.
import { useEffect, useState } from 'preact/hooks';
import { get, type Explanation, type Job, type JobPage } from '../api';
import { ago, dateTime, duration, placement, request } from '../format';
import { useApi, useTick } from '../live';
import { JobLink, Phase, Problem, Section, Table, type Column } from '../ui';

const EXPLAINED = 25; // estimated starts asked for the first pending jobs only

// The scheduler's estimated start of each of the first pending jobs.
function useEstimates(pending: Job[]): Map<number, number | null> {
  const tick = useTick();
  const [estimates, setEstimates] = useState(new Map<number, number | null>());
  const ids = pending.slice(0, EXPLAINED).map((j) => j.id);
  const key = ids.join(',');
  useEffect(() => {
    let live = true;
    Promise.all(
      ids.map((id) =>
        get<Explanation>(`/jobs/${id}/explanation`).then(
          (e) => [id, e.estimatedStart ?? null] as const,
          () => [id, null] as const,
        ),
      ),
    ).then((pairs) => live && setEstimates(new Map(pairs)));
    return () => {
      live = false;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [key, tick]);
  return estimates;
}

const jobColumn: Column<Job> = { label: 'Job', rowHeader: true, cell: (j) => <JobLink id={j.id} name={j.metadata.name} /> };
const projectColumn: Column<Job> = { label: 'Project', cell: (j) => j.metadata.project };
const asksColumn: Column<Job> = { label: 'Asks for', cell: request };

export function QueueView() {
  const active = useApi<JobPage>('/jobs?phase=Pending,Placed,Running,Stopping&limit=1000');
  const failed = useApi<JobPage>('/jobs?phase=Failed&order=newest&limit=20');
  const jobs = active.data?.items ?? [];
  const pending = jobs.filter((j) => j.status.phase === 'Pending');
  const running = jobs.filter((j) => j.status.phase !== 'Pending');
  const estimates = useEstimates(pending);
  if (active.error) return <Problem message={active.error} />;
  if (!active.data) return <p aria-busy="true">Loading the queue…</p>;
  const failures = failed.data?.items ?? [];
  const table = { rowKey: (j: Job) => j.id, rowAttrs: (j: Job) => ({ 'data-job': j.id }), stack: true };
  return (
    <>
      <h1>Queue</h1>
      <Section title="Pending" id="pending" count={pending.length}>
        <Table
          {...table}
          testId="pending"
          rows={pending}
          empty="Nothing waits."
          columns={[
            jobColumn,
            projectColumn,
            asksColumn,
            { label: 'Priority', cell: (j) => j.spec.priorityClass ?? '–' },
            { label: 'Waiting', cell: (j) => duration(Date.now() / 1000 - j.status.submittedAt) },
            { label: 'Why it waits', cls: 'reason', cell: (j) => j.status.reason },
            {
              label: 'Estimated start',
              cell: (j) => {
                const est = estimates.get(j.id);
                return est ? dateTime(est) : est === null ? 'unknown' : '…';
              },
            },
          ]}
        />
      </Section>
      <Section title="Running" id="running" count={running.length}>
        <Table
          {...table}
          testId="running"
          rows={running}
          empty="Nothing runs."
          columns={[
            jobColumn,
            projectColumn,
            { label: 'Phase', cell: (j) => <Phase phase={j.status.phase} /> },
            asksColumn,
            { label: 'Placed on', cell: placement },
            { label: 'Started', cell: (j) => ago(j.status.startedAt ?? j.status.updatedAt) },
          ]}
        />
      </Section>
      <Section title="Recent failures" id="failures" count={failures.length}>
        <Table
          {...table}
          testId="failures"
          rows={failures}
          empty="No failures."
          columns={[
            jobColumn,
            projectColumn,
            { label: 'Ended', cell: (j) => ago(j.status.finishedAt ?? j.status.updatedAt) },
            { label: 'Reason', cls: 'reason', cell: (j) => j.status.reason },
          ]}
        />
      </Section>
    </>
  );
}
