// Small pieces every view uses.
import type { ComponentChildren } from 'preact';
import { argvToText, shellQuote, shellScript } from './command';

export function Problem({ message }: { message: string }) {
  return (
    <p class="problem" role="alert">
      {message}
    </p>
  );
}

export function Stat(props: { label: string; value: string; hint?: string; warn?: boolean }) {
  return (
    <div class={`stat${props.warn ? ' warn' : ''}`} role="listitem">
      <span class="stat-label">{props.label}</span>
      <span class="stat-value">{props.value}</span>
      {props.hint && <span class="stat-hint">{props.hint}</span>}
    </div>
  );
}

const PHASE_CLASS: Record<string, string> = {
  Pending: 'phase-pending',
  Placed: 'phase-running',
  Running: 'phase-running',
  Stopping: 'phase-pending',
  Succeeded: 'phase-ok',
  Failed: 'phase-bad',
  Cancelled: 'phase-muted',
  Ready: 'phase-ok',
  Lost: 'phase-bad',
};

export function Phase({ phase }: { phase: string }) {
  return <span class={`phase ${PHASE_CLASS[phase] ?? ''}`}>{phase}</span>;
}

export function Section(props: { title: string; id: string; children: ComponentChildren; count?: number }) {
  return (
    <section aria-labelledby={props.id}>
      <h2 id={props.id}>
        {props.title}
        {props.count !== undefined && <span class="count"> ({props.count})</span>}
      </h2>
      {props.children}
    </section>
  );
}

export function JobLink({ id, name }: { id: number; name?: string }) {
  return <a href={`#/jobs/${id}`}>{name ? `${name} (#${id})` : `#${id}`}</a>;
}

export interface Column<T> {
  label: string;
  cell: (row: T) => ComponentChildren;
  numeric?: boolean; // right-aligned, tabular figures
  cls?: string;
  rowHeader?: boolean; // the cell that names the row (a <th scope=row>)
  sortKey?: string; // a header that sorts (with the table's onSort)
}

export interface SortOrder {
  key: string;
  dir: 'asc' | 'desc';
}

// A table in a horizontally scrolling box. With `stack`, a narrow screen shows each row as a
// card, every value under its column's name.
export function Table<T>(props: {
  columns: Column<T>[];
  rows: T[];
  rowKey: (row: T) => string | number;
  rowAttrs?: (row: T) => Record<string, string | number>;
  empty: string;
  testId?: string;
  caption?: ComponentChildren;
  stack?: boolean;
  sort?: SortOrder;
  onSort?: (key: string) => void;
}) {
  const cls = (c: Column<T>) => [c.numeric ? 'n' : '', c.cls ?? ''].join(' ').trim() || undefined;
  return (
    <div class="scroll">
      <table class={props.stack ? 'stack' : undefined} data-testid={props.testId}>
        {props.caption && <caption>{props.caption}</caption>}
        <thead>
          <tr>
            {props.columns.map((c) => {
              const sorted = c.sortKey && props.sort?.key === c.sortKey ? props.sort.dir : undefined;
              return (
                <th
                  key={c.label}
                  scope="col"
                  class={cls(c)}
                  aria-sort={sorted ? (sorted === 'asc' ? 'ascending' : 'descending') : c.sortKey ? 'none' : undefined}
                >
                  {c.sortKey && props.onSort ? (
                    <button type="button" class="sort" data-sort={c.sortKey} onClick={() => props.onSort!(c.sortKey!)}>
                      {c.label}
                      {sorted ? (sorted === 'asc' ? ' ▲' : ' ▼') : ''}
                    </button>
                  ) : (
                    c.label
                  )}
                </th>
              );
            })}
          </tr>
        </thead>
        <tbody>
          {props.rows.map((row) => (
            <tr key={props.rowKey(row)} {...(props.rowAttrs?.(row) ?? {})}>
              {props.columns.map((c) =>
                c.rowHeader ? (
                  <th key={c.label} scope="row" class={cls(c)}>
                    {c.cell(row)}
                  </th>
                ) : (
                  <td key={c.label} class={cls(c)} data-label={props.stack ? c.label : undefined}>
                    {c.cell(row)}
                  </td>
                ),
              )}
            </tr>
          ))}
          {!props.rows.length && (
            <tr>
              <td colSpan={props.columns.length} class="muted">
                {props.empty}
              </td>
            </tr>
          )}
        </tbody>
      </table>
    </div>
  );
}

// A command as written: an argv as a shell would quote it; a `sh -c` script on its own lines.
export function Command({ argv }: { argv: string[] }) {
  const script = shellScript(argv);
  if (!script) return <code data-testid="command">{argvToText(argv)}</code>;
  return (
    <div data-testid="command">
      <code>
        {shellQuote(script.shell)} -c{script.args.length ? ` … ${script.args.map(shellQuote).join(' ')}` : ''}
      </code>
      <pre class="script" tabIndex={0} aria-label="The script">
        {script.script}
      </pre>
    </div>
  );
}

export function NodeLink({ name }: { name: string }) {
  return <a href={`#/nodes/${encodeURIComponent(name)}`}>{name}</a>;
}
