// Audit: every mutating or denied call, newest first (admins only: the API refuses others).
import { useState } from 'preact/hooks';
import type { AuditEntry } from '../api';
import { dateTime } from '../format';
import { useApi } from '../live';
import { Problem, Table } from '../ui';

export function AuditView() {
  const [result, setResult] = useState('');
  const audit = useApi<{ items: AuditEntry[] }>(`/audit?order=newest&limit=200${result ? `&result=${result}` : ''}`);
  return (
    <>
      <h1>Audit log</h1>
      <label class="filter">
        Result{' '}
        <select value={result} onChange={(e) => setResult((e.target as HTMLSelectElement).value)}>
          <option value="">all</option>
          <option value="allowed">allowed</option>
          <option value="denied">denied</option>
          <option value="failed">failed</option>
        </select>
      </label>
      {audit.error && <Problem message={audit.error} />}
      {audit.data && (
        <Table
          testId="audit"
          rows={audit.data.items}
          rowKey={(a) => a.seq}
          empty="No entries."
          columns={[
            { label: 'When', cell: (a) => dateTime(a.at) },
            { label: 'User', cell: (a) => a.user || '–' },
            { label: 'Action', cell: (a) => a.action },
            {
              label: 'Call',
              cell: (a) => (
                <code>
                  {a.method} {a.path}
                </code>
              ),
            },
            { label: 'Project', cell: (a) => a.project || '–' },
            { label: 'Result', cell: (a) => <span class={a.result === 'allowed' ? 'good' : 'bad'}>{`${a.result} (${a.code})`}</span> },
            { label: 'Message', cell: (a) => a.message },
          ]}
        />
      )}
    </>
  );
}
