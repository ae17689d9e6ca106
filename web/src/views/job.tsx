// Job detail: what it asks for, where it runs, its events as a timeline, and its output's tail.
import { useEffect, useState } from 'preact/hooks';
import { get, getLogs, post, type Allocation, type Event, type Explanation, type Job, type NodeHistory } from '../api';
import { Chart, type Series } from '../chart';
import { clock, dateTime, request } from '../format';
import { useApi, useTick } from '../live';
import { Command, NodeLink, Phase, Problem, Section, Table } from '../ui';
import { sinceAnHourAgo } from './node';

const TAIL_BYTES = 64 * 1024;

type TaskStatus = NonNullable<Job['status']['tasks']>[number];

function devices(a: Allocation): string {
  const each = a.devices.map((d) => `GPU ${d.gpu}${d.mig ? ` MIG ${d.mig.profile}` : d.milli < 1000 ? ` (${d.milli / 1000})` : ''}`);
  return each.join(', ') || 'CPU only';
}

function taskState(s: TaskStatus | undefined): string {
  if (!s) return 'Placed';
  let out = s.state;
  if (s.exitCode !== undefined) out += `, exit ${s.exitCode}`;
  if (s.cause) out += `, ${s.cause}`;
  if (s.restarts) out += `, ${s.restarts} restarts`;
  if (s.message) out += ` (${s.message})`;
  return out;
}

function LogTail({ job, tasks }: { job: Job; tasks: number }) {
  const tick = useTick();
  const [task, setTask] = useState(0);
  const [log, setLog] = useState<{ text: string; size: number; error?: string }>({ text: '', size: 0 });
  useEffect(() => {
    let live = true;
    (async () => {
      try {
        const head = await getLogs(job.id, task, 0, 1);
        const from = Math.max(0, head.size - TAIL_BYTES);
        const tail = head.size > 1 ? await getLogs(job.id, task, from, TAIL_BYTES) : head;
        if (live) setLog({ text: (from > 0 ? '…\n' : '') + tail.text, size: head.size });
      } catch (e) {
        if (live) setLog({ text: '', size: 0, error: e instanceof Error ? e.message : String(e) });
      }
    })();
    return () => {
      live = false;
    };
  }, [job.id, task, tick, job.status.phase]);
  return (
    <Section title="Output" id="logs">
      {tasks > 1 && (
        <label class="filter">
          Task{' '}
          <select value={task} onChange={(e) => setTask(Number((e.target as HTMLSelectElement).value))}>
            {Array.from({ length: tasks }, (_, i) => (
              <option key={i} value={i}>
                {i}
              </option>
            ))}
          </select>
        </label>
      )}
      {log.error && <Problem message={log.error} />}
      <pre class="logs" data-testid="logs" tabIndex={0} aria-label={`Output of task ${task}`}>
        {log.text || (job.status.phase === 'Pending' ? 'No output yet: the job has not started.' : 'No output.')}
      </pre>
      <p class="muted">
        The last {TAIL_BYTES / 1024} KiB of {log.size} bytes; `meridian logs {job.id}
        {task ? ` --task ${task}` : ''}` prints all of it.
      </p>
    </Section>
  );
}

const ENDED = ['Succeeded', 'Failed', 'Cancelled'];

// The utilisation of the job's GPUs while it ran (the last hour of it: what the server keeps of
// each node), one line per GPU, from its nodes' telemetry.
function useJobTelemetry(job: Job): { at: number[]; series: Series[]; error?: string } {
  const tick = useTick();
  const [out, setOut] = useState<{ at: number[]; series: Series[]; error?: string }>({ at: [], series: [] });
  const alloc = job.status.allocation ?? [];
  const start = job.status.startedAt ?? job.status.updatedAt;
  const end = job.status.finishedAt;
  const nodes = [...new Set(alloc.filter((a) => a.devices.length).map((a) => a.node))];
  const key = `${nodes.join(',')}|${start}|${end}`;
  const recent = !end || Date.now() / 1000 - end < 3600;
  useEffect(() => {
    if (!nodes.length || !recent) return;
    let live = true;
    const since = sinceAnHourAgo(Math.floor(start));
    Promise.all(nodes.map((n) => get<NodeHistory>(`/nodes/${encodeURIComponent(n)}/history?since=${since}`))).then(
      (histories) => {
        if (!live) return;
        const within = (t: number) => t >= start - 1 && (!end || t <= end + 1);
        const at = histories[0].at.filter(within);
        const series: Series[] = [];
        histories.forEach((h, i) => {
          const where = new Map(h.at.map((t, k) => [t, k]));
          for (const a of alloc.filter((x) => x.node === nodes[i])) {
            for (const d of a.devices) {
              const g = h.gpus.find((x) => x.index === d.gpu);
              series.push({
                label: `task ${a.task}: ${a.node} GPU ${d.gpu}`,
                values: at.map((t) => (g && where.has(t) ? g.utilization[where.get(t)!] : null)),
              });
            }
          }
        });
        setOut({ at, series });
      },
      (e: Error) => live && setOut({ at: [], series: [], error: e.message }),
    );
    return () => {
      live = false;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [key, tick]);
  return nodes.length && recent ? out : { at: [], series: [] };
}

function JobTelemetry({ job }: { job: Job }) {
  const t = useJobTelemetry(job);
  if (!t.series.length && !t.error) return null;
  return (
    <Section title="GPU utilisation" id="job-telemetry">
      {t.error && <Problem message={t.error} />}
      <Chart title="Utilisation of its GPUs" at={t.at} series={t.series} unit="%" testId="chart-job-util" />
    </Section>
  );
}

// Cancel, in two steps so that a stray click or key press cancels nothing. The server decides
// who may (owners and team leads and above); its refusal is shown as it comes.
function CancelButton({ job }: { job: Job }) {
  const [asking, setAsking] = useState(false);
  const [error, setError] = useState('');
  if (ENDED.includes(job.status.phase)) return null;
  const cancel = async () => {
    setError('');
    try {
      await post(`/jobs/${job.id}/cancel`);
      setAsking(false);
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
    }
  };
  return (
    <div class="actions">
      {!asking ? (
        <button type="button" class="secondary" onClick={() => setAsking(true)}>
          Cancel job
        </button>
      ) : (
        <>
          <span>Cancel {job.metadata.name}? Its tasks get their notice and grace period.</span>{' '}
          <button type="button" class="danger" onClick={cancel}>
            Yes, cancel it
          </button>{' '}
          <button type="button" class="secondary" onClick={() => setAsking(false)}>
            Keep it
          </button>
        </>
      )}
      {error && <Problem message={error} />}
    </div>
  );
}

export function JobView({ id }: { id: number }) {
  const job = useApi<Job>(`/jobs/${id}`);
  const events = useApi<{ items: Event[] }>(`/jobs/${id}/events`);
  const pending = job.data?.status.phase === 'Pending';
  const why = useApi<Explanation>(pending ? `/jobs/${id}/explanation` : null);
  if (job.error) return <Problem message={job.error} />;
  if (!job.data) return <p aria-busy="true">Loading job {id}…</p>;
  const j = job.data;
  const states = j.status.tasks ?? [];
  const alloc = j.status.allocation ?? [];
  return (
    <>
      <p class="crumbs">
        <a href="#/queue">Queue</a> › job {j.id}
      </p>
      <h1>
        {j.metadata.name} <span class="muted">#{j.id}</span> <Phase phase={j.status.phase} />
      </h1>
      <CancelButton job={j} />
      <dl class="facts">
        <dt>Project</dt>
        <dd>{j.metadata.project}</dd>
        <dt>Submitted by</dt>
        <dd>{j.metadata.user}</dd>
        <dt>Asks for</dt>
        <dd>{request(j)}</dd>
        <dt>Priority</dt>
        <dd>{j.spec.priorityClass ?? 'default'}</dd>
        <dt>Submitted</dt>
        <dd>{dateTime(j.status.submittedAt)}</dd>
        <dt>Reason</dt>
        <dd data-testid="job-reason">{j.status.reason || '–'}</dd>
        {j.status.cause && (
          <>
            <dt>Cause</dt>
            <dd data-testid="job-cause">
              <span class="badge badge-warn">{j.status.cause}</span>
            </dd>
          </>
        )}
        {j.spec.command && (
          <>
            <dt>Command</dt>
            <dd>
              <Command argv={j.spec.command} />
            </dd>
          </>
        )}
        {j.spec.image && (
          <>
            <dt>Image</dt>
            <dd>
              <code>{j.spec.image}</code>
            </dd>
          </>
        )}
      </dl>
      {pending && why.data && (
        <Section title="Why it waits" id="why">
          <p>
            {why.data.reason ?? why.data.message ?? j.status.reason}
          </p>
          <p data-testid="estimated-start">
            Estimated start:{' '}
            {why.data.estimatedStart
              ? dateTime(why.data.estimatedStart)
              : 'unknown (the scheduler has no estimate for it)'}
          </p>
          {(why.data.clusters ?? []).length > 0 && (
            <ul>
              {(why.data.clusters ?? []).map((c) => (
                <li key={c.name}>
                  <strong>{c.name}</strong>: {c.reason}
                </li>
              ))}
            </ul>
          )}
        </Section>
      )}
      {alloc.length > 0 && (
        <Section title="Placement" id="placement">
          <Table
            testId="placement"
            rows={alloc}
            rowKey={(a) => a.task}
            empty="Not placed."
            columns={[
              { label: 'Task', rowHeader: true, cell: (a) => a.task },
              { label: 'Cluster', cell: (a) => <a href={`#/clusters/${encodeURIComponent(a.cluster)}`}>{a.cluster}</a> },
              { label: 'Node', cell: (a) => <NodeLink name={a.node} /> },
              { label: 'Devices', cell: (a) => devices(a) },
              { label: 'State', cell: (a) => taskState(states[a.task]) },
            ]}
          />
        </Section>
      )}
      <JobTelemetry job={j} />
      <Section title="Events" id="events">
        {events.error && <Problem message={events.error} />}
        <ol class="timeline" data-testid="events">
          {(events.data?.items ?? []).map((e) => (
            <li key={e.seq} class={e.type === 'Warning' ? 'warning' : ''}>
              <time dateTime={new Date(e.at * 1000).toISOString()}>{clock(e.at)}</time> <strong>{e.reason}</strong> {e.message}
            </li>
          ))}
        </ol>
      </Section>
      <LogTail job={j} tasks={Math.max(1, alloc.length || (j.spec.tasks ?? 1))} />
    </>
  );
}
