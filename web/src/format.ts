// How numbers, times and requests read on the dashboard.
import type { Job } from './api';

export function pct(v: number | null | undefined): string {
  return v == null || Number.isNaN(v) ? '–' : `${Math.round(v * 100)}%`;
}

export function num(v: number, digits = 1): string {
  return Number.isInteger(v) ? String(v) : v.toFixed(digits);
}

export function money(v: number): string {
  return `$${v.toFixed(2)}`;
}

// "3 s", "4 min", "2 h 5 min", "3 d" from seconds.
export function duration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) {
    const m = Math.floor((s % 3600) / 60);
    return `${Math.floor(s / 3600)} h${m ? ` ${m} min` : ''}`;
  }
  return `${Math.floor(s / 86400)} d`;
}

export function ago(unixSeconds: number | undefined): string {
  if (!unixSeconds) return '–';
  return `${duration(Date.now() / 1000 - unixSeconds)} ago`;
}

export function clock(unixSeconds: number): string {
  return new Date(unixSeconds * 1000).toLocaleTimeString([], { hour12: false });
}

export function dateTime(unixSeconds: number): string {
  const d = new Date(unixSeconds * 1000);
  return `${d.toLocaleDateString()} ${d.toLocaleTimeString([], { hour12: false })}`;
}

// What a job asks for: "2 × 4 GPUs", "0.25 GPU", "1g.10gb", "CPU only".
export function request(job: Job): string {
  const s = job.spec;
  const tasks = s.tasks ?? 1;
  let each = 'CPU only';
  if (s.gpus) each = `${s.gpus} GPU${s.gpus > 1 ? 's' : ''}`;
  else if (s.gpuMilli) each = `${s.gpuMilli / 1000} GPU`;
  else if (s.migProfile) each = `MIG ${s.migProfile}`;
  return tasks > 1 ? `${tasks} × ${each}` : each;
}

export function placement(job: Job): string {
  const alloc = job.status.allocation ?? [];
  if (!alloc.length) return '–';
  const nodes = [...new Set(alloc.map((a) => `${a.cluster}/${a.node}`))];
  return nodes.length > 2 ? `${nodes.slice(0, 2).join(', ')} +${nodes.length - 2}` : nodes.join(', ');
}
