// Audit: every mutating or denied call, newest first (admins only: the API refuses others).
import { useState } from 'preact/hooks';
import type { AuditEntry } from '../api';
import { dateTime } from '../format';
import { useApi } from '../live';
import { Problem } from '../ui';

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
        <div class="scroll">
          <table data-testid="audit">
            <thead>
              <tr>
                <th scope="col">When</th>
                <th scope="col">User</th>
                <th scope="col">Action</th>
                <th scope="col">Call</th>
                <th scope="col">Project</th>
                <th scope="col">Result</th>
                <th scope="col">Message</th>
              </tr>
            </thead>
            <tbody>
              {audit.data.items.map((a) => (
                <tr key={a.seq}>
                  <td>{dateTime(a.at)}</td>
                  <td>{a.user || '–'}</td>
                  <td>{a.action}</td>
                  <td>
                    <code>
                      {a.method} {a.path}
                    </code>
                  </td>
                  <td>{a.project || '–'}</td>
                  <td class={a.result === 'allowed' ? 'good' : 'bad'}>
                    {a.result} ({a.code})
                  </td>
                  <td>{a.message}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}
