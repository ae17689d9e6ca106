// Submit a job: a form for the common fields, or the whole document as YAML. The server decides
// (who may submit to which project, what the estate could ever hold); its refusal is shown at
// the field it names, and in YAML at that field's line.
import { useState } from 'preact/hooks';
import { stringify } from 'yaml';
import { ApiError, post, type ConfigObject, type Job, type Node, type WhoAmI } from '../api';
import { textToArgv } from '../command';
import { useApi } from '../live';
import { Problem } from '../ui';
import { lineOf, parseJobYaml } from '../yamlfield';

interface FormState {
  project: string;
  name: string;
  command: string;
  gpus: string;
  model: string;
  tasks: string;
  priorityClass: string;
  array: string;
}

// The API's field for each of the form's inputs.
const FIELDS: Record<keyof FormState, string[]> = {
  project: ['metadata.project'],
  name: ['metadata.name'],
  command: ['spec.command'],
  gpus: ['spec.gpus'],
  model: ['spec.gpuModels'],
  tasks: ['spec.tasks'],
  priorityClass: ['spec.priorityClass'],
  array: ['spec.array'],
};

function inputOf(field: string): keyof FormState | undefined {
  const base = field.replace(/\[\d+\]$/, '');
  return (Object.keys(FIELDS) as (keyof FormState)[]).find((k) => FIELDS[k].includes(base));
}

// What the form asks for, as the API's document.
function documentOf(f: FormState): Record<string, unknown> {
  const spec: Record<string, unknown> = {};
  const command = textToArgv(f.command);
  if (command.length) spec.command = command;
  if (f.gpus.trim() !== '') spec.gpus = Number(f.gpus);
  if (f.model) spec.gpuModels = [f.model];
  if (f.tasks.trim() !== '' && f.tasks.trim() !== '1') spec.tasks = Number(f.tasks);
  if (f.priorityClass) spec.priorityClass = f.priorityClass;
  if (f.array.trim()) spec.array = f.array.trim();
  return { kind: 'Job', metadata: { name: f.name.trim(), project: f.project }, spec };
}

type Refusal = { field?: keyof FormState; message: string; status: number };

// A number field's own check, before the server's: a clear message rather than a NaN sent.
function checkNumbers(f: FormState): Refusal | null {
  for (const k of ['gpus', 'tasks'] as const) {
    const v = f[k].trim();
    if (v !== '' && !/^\d+$/.test(v)) return { field: k, message: `${k === 'gpus' ? 'GPUs' : 'Tasks'}: a whole number, not "${v}"`, status: 0 };
  }
  return null;
}

function submitted(job: Job) {
  location.hash = `#/jobs/${job.id}`;
}

// The server's message starts with the field it names ("spec.gpus: 16 GPUs per task, ..."):
// shown at the field, once is enough.
function withoutField(message: string, field?: string): string {
  return field && message.startsWith(`${field}: `) ? message.slice(field.length + 2) : message;
}

function refusalOf(e: unknown): { status: number; message: string; field?: string } {
  if (e instanceof ApiError) return { status: e.status, message: e.message, field: e.field };
  return { status: 0, message: e instanceof Error ? e.message : String(e) };
}

function Forbidden({ message }: { message: string }) {
  return <Problem message={`Not allowed to submit: ${message}`} />;
}

function JobForm({ who, form, setForm }: { who: WhoAmI; form: FormState; setForm: (f: FormState) => void }) {
  const nodes = useApi<{ items: Node[] }>('/nodes');
  const classes = useApi<{ items: ConfigObject[] }>('/priorityclasses');
  const [refusal, setRefusal] = useState<Refusal | null>(null);
  const [busy, setBusy] = useState(false);
  const models = [...new Set((nodes.data?.items ?? []).map((n) => n.model).filter(Boolean))].sort();
  const set = (k: keyof FormState) => (e: Event) => setForm({ ...form, [k]: (e.target as HTMLInputElement).value });
  const submit = async (e: Event) => {
    e.preventDefault();
    const own = checkNumbers(form);
    if (own) return setRefusal(own);
    setBusy(true);
    setRefusal(null);
    try {
      submitted(await post<Job>('/jobs', documentOf(form)));
    } catch (err) {
      const r = refusalOf(err);
      const input = r.field ? inputOf(r.field) : undefined;
      setRefusal({ ...r, field: input, message: input ? withoutField(r.message, r.field) : r.message });
    } finally {
      setBusy(false);
    }
  };
  const field = (k: keyof FormState, label: string, control: preact.JSX.Element, hint?: string) => {
    const wrong = refusal?.field === k;
    return (
      <div class="field" data-field={k}>
        <label for={`job-${k}`}>{label}</label>
        {control}
        {hint && (
          <span class="hint" id={`job-${k}-hint`}>
            {hint}
          </span>
        )}
        {wrong && (
          <p class="field-error" id={`job-${k}-error`} role="alert">
            {refusal!.message}
          </p>
        )}
      </div>
    );
  };
  const attrs = (k: keyof FormState) => ({
    id: `job-${k}`,
    name: k,
    value: form[k],
    onInput: set(k),
    'aria-invalid': refusal?.field === k ? ('true' as const) : undefined,
    'aria-describedby': refusal?.field === k ? `job-${k}-error` : undefined,
  });
  const projects = who.projects ?? [];
  return (
    <form class="form" onSubmit={submit} aria-label="Job" noValidate>
      <div class="row">
        {field(
          'project',
          'Project',
          projects.length ? (
            <select {...attrs('project')} onChange={set('project')}>
              {projects.map((p) => (
                <option key={p} value={p}>
                  {p}
                </option>
              ))}
            </select>
          ) : (
            <input {...attrs('project')} required />
          ),
        )}
        {field('name', 'Name', <input {...attrs('name')} required autocomplete="off" />)}
      </div>
      {field(
        'command',
        'Command',
        <textarea {...attrs('command')} rows={5} spellcheck={false} />,
        'One line of plain words runs as they are (python train.py --lr 0.1); several lines, pipes, variables or redirections run as a script with sh -c, as written.',
      )}
      <div class="row">
        {field('gpus', 'GPUs per task', <input {...attrs('gpus')} inputMode="numeric" />)}
        {field(
          'model',
          'GPU model',
          <select {...attrs('model')} onChange={set('model')}>
            <option value="">any</option>
            {models.map((m) => (
              <option key={m} value={m}>
                {m}
              </option>
            ))}
          </select>,
        )}
        {field('tasks', 'Tasks', <input {...attrs('tasks')} inputMode="numeric" />)}
        {field(
          'priorityClass',
          'Priority class',
          <select {...attrs('priorityClass')} onChange={set('priorityClass')}>
            <option value="">default</option>
            {(classes.data?.items ?? []).map((c) => (
              <option key={c.metadata.name} value={c.metadata.name}>
                {c.metadata.name}
              </option>
            ))}
          </select>,
        )}
        {field('array', 'Array', <input {...attrs('array')} placeholder="0-99%10" autocomplete="off" />, 'Slurm’s forms: 0-15, 1,3,5-7, 0-999%50')}
      </div>
      {refusal && refusal.status === 403 && <Forbidden message={refusal.message} />}
      {refusal && refusal.status !== 403 && !refusal.field && <Problem message={refusal.message} />}
      <div>
        <button type="submit" disabled={busy}>
          Submit job
        </button>
      </div>
    </form>
  );
}

function YamlForm({ text, setText }: { text: string; setText: (t: string) => void }) {
  const [problems, setProblems] = useState<{ line: number; message: string }[]>([]);
  const [forbidden, setForbidden] = useState('');
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    setForbidden('');
    const parsed = parseJobYaml(text);
    setProblems(parsed.errors);
    if (parsed.errors.length) return;
    setBusy(true);
    try {
      submitted(await post<Job>('/jobs', parsed.value));
    } catch (err) {
      const r = refusalOf(err);
      if (r.status === 403) setForbidden(r.message);
      else {
        const line = r.field ? lineOf(parsed, r.field) : 0;
        const message = line ? `${r.field}: ${withoutField(r.message, r.field)}` : r.message;
        setProblems([{ line, message }]);
      }
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="form" onSubmit={submit} aria-label="Job as YAML" noValidate>
      <div class="field">
        <label for="job-yaml">The job as YAML (as for meridian submit -f)</label>
        <textarea
          id="job-yaml"
          class="yaml"
          spellcheck={false}
          value={text}
          onInput={(e) => setText((e.target as HTMLTextAreaElement).value)}
          aria-invalid={problems.length ? 'true' : undefined}
          aria-describedby={problems.length ? 'job-yaml-errors' : undefined}
        />
        {problems.length > 0 && (
          <ul id="job-yaml-errors" class="field-error" role="alert" data-testid="yaml-errors">
            {problems.map((p, i) => (
              <li key={i} data-line={p.line}>
                {p.line ? `Line ${p.line}: ` : ''}
                {p.message}
              </li>
            ))}
          </ul>
        )}
      </div>
      {forbidden && <Forbidden message={forbidden} />}
      <div>
        <button type="submit" disabled={busy}>
          Submit job
        </button>
      </div>
    </form>
  );
}

export function SubmitView({ who }: { who: WhoAmI }) {
  const [tab, setTab] = useState<'form' | 'yaml'>('form');
  const [form, setForm] = useState<FormState>({
    project: who.projects?.[0] ?? '',
    name: '',
    command: '',
    gpus: '1',
    model: '',
    tasks: '1',
    priorityClass: '',
    array: '',
  });
  const [yaml, setYaml] = useState('');
  const show = (t: 'form' | 'yaml') => {
    // The YAML tab starts from what the form holds, until it is edited.
    if (t === 'yaml' && !yaml) setYaml(stringify(documentOf(form)));
    setTab(t);
  };
  return (
    <>
      <h1>Submit a job</h1>
      <div class="tabs" role="tablist" aria-label="How to write the job">
        {(['form', 'yaml'] as const).map((t) => (
          <button key={t} type="button" role="tab" id={`tab-${t}`} aria-selected={tab === t} aria-controls="submit-panel" onClick={() => show(t)}>
            {t === 'form' ? 'Form' : 'YAML'}
          </button>
        ))}
      </div>
      <div id="submit-panel" role="tabpanel" aria-labelledby={`tab-${tab}`}>
        {tab === 'form' ? <JobForm who={who} form={form} setForm={setForm} /> : <YamlForm text={yaml} setText={setYaml} />}
      </div>
    </>
  );
}
