// Queue: what waits (and why, and until when), what runs, and what failed lately.
import { useEffect, useState } from 'preact/hooks';
import { get, type Explanation, type Job, type JobPage } from '../api';
import { ago, dateTime, duration, placement, request } from '../format';
import { useApi, useTick } from '../live';
import { JobLink, Phase, Problem, Section } from '../ui';

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
          (e) => [id, e.estimatedStart] as const,
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

export function QueueView() {
  const active = useApi<JobPage>('/jobs?phase=Pending,Placed,Running,Stopping&limit=1000');
  const failed = useApi<JobPage>("/jobs?phase=Failed&order=newest&limit=20");
  const jobs = active.data?.items ?? [];
  const pending = jobs.filter((j) => j.status.phase === 'Pending');
  const running = jobs.filter((j) => j.status.phase !== 'Pending');
  const estimates = useEstimates(pending);
  if (active.error) return <Problem message={active.error} />;
  if (!active.data) return <p aria-busy="true">Loading the queue…</p>;
  const recentFailures = failed.data?.items ?? [];
  return (
    <>
      <h1>Queue</h1>
      <Section title="Pending" id="pending" count={pending.length}>
        <div class="scroll">
          <table class="stack" data-testid="pending">
            <thead>
              <tr>
                <th scope="col">Job</th>
                <th scope="col">Project</th>
                <th scope="col">Asks for</th>
                <th scope="col">Priority</th>
                <th scope="col">Waiting</th>
                <th scope="col">Why it waits</th>
                <th scope="col">Estimated start</th>
              </tr>
            </thead>
            <tbody>
              {pending.map((j) => {
                const est = estimates.get(j.id);
                return (
                  <tr key={j.id} data-job={j.id}>
                    <th scope="row">
                      <JobLink id={j.id} name={j.metadata.name} />
                    </th>
                    <td data-label="Project">{j.metadata.project}</td>
                    <td data-label="Asks for">{request(j)}</td>
                    <td data-label="Priority">{j.spec.priorityClass ?? '–'}</td>
                    <td data-label="Waiting">{duration(Date.now() / 1000 - j.status.submittedAt)}</td>
                    <td data-label="Why" class="reason">
                      {j.status.reason}
                    </td>
                    <td data-label="Estimated start">{est ? dateTime(est) : est === null ? 'unknown' : '…'}</td>
                  </tr>
                );
              })}
              {!pending.length && (
                <tr>
                  <td colSpan={7} class="muted">
                    Nothing waits.
                  </td>
                </tr>
              )}
            </tbody>
          </table>
        </div>
      </Section>
      <Section title="Running" id="running" count={running.length}>
        <div class="scroll">
          <table class="stack" data-testid="running">
            <thead>
              <tr>
                <th scope="col">Job</th>
                <th scope="col">Project</th>
                <th scope="col">Phase</th>
                <th scope="col">Asks for</th>
                <th scope="col">Placed on</th>
                <th scope="col">Started</th>
              </tr>
            </thead>
            <tbody>
              {running.map((j) => (
                <tr key={j.id} data-job={j.id}>
                  <th scope="row">
                    <JobLink id={j.id} name={j.metadata.name} />
                  </th>
                  <td data-label="Project">{j.metadata.project}</td>
                  <td data-label="Phase">
                    <Phase phase={j.status.phase} />
                  </td>
                  <td data-label="Asks for">{request(j)}</td>
                  <td data-label="Placed on">{placement(j)}</td>
                  <td data-label="Started">{ago(j.status.startedAt ?? j.status.updatedAt)}</td>
                </tr>
              ))}
              {!running.length && (
                <tr>
                  <td colSpan={6} class="muted">
                    Nothing runs.
                  </td>
                </tr>
              )}
            </tbody>
          </table>
        </div>
      </Section>
      <Section title="Recent failures" id="failures" count={recentFailures.length}>
        <div class="scroll">
          <table class="stack" data-testid="failures">
            <thead>
              <tr>
                <th scope="col">Job</th>
                <th scope="col">Project</th>
                <th scope="col">Ended</th>
                <th scope="col">Reason</th>
              </tr>
            </thead>
            <tbody>
              {recentFailures.map((j) => (
                <tr key={j.id} data-job={j.id}>
                  <th scope="row">
                    <JobLink id={j.id} name={j.metadata.name} />
                  </th>
                  <td data-label="Project">{j.metadata.project}</td>
                  <td data-label="Ended">{ago(j.status.finishedAt ?? j.status.updatedAt)}</td>
                  <td data-label="Reason" class="reason">
                    {j.status.reason}
                  </td>
                </tr>
              ))}
              {!recentFailures.length && (
                <tr>
                  <td colSpan={4} class="muted">
                    No failures.
                  </td>
                </tr>
              )}
            </tbody>
          </table>
        </div>
      </Section>
    </>
  );
}
