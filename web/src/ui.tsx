// Small pieces every view uses.
import type { ComponentChildren } from 'preact';

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
